(* The switching feature of the group runtime: the stack the current view
   runs, its epoch (switches that made it), a switch wanted and the stack
   of the next view this coordinator makes. *)

open Consort
module Log = Group_log.Log

type t = {
  me : string;
  base : Params.t; (* the member's parameters: a stack it is told of is resolved against them *)
  xfer : bool; (* the member's stack has Xfer, which a switch may not add or remove *)
  mutable layers : Layer.t list; (* the stack of the current view *)
  mutable params : Params.t;
  mutable sid : Stack_id.t;
  mutable epoch : int; (* switches that made the current stack *)
  mutable switch_to : (int * Stack_id.t) option;
      (* the stack of the view this coordinator makes next *)
  mutable switch_wanted : (int * int * Stack_id.t) option;
      (* a switch asked in the stack of this epoch, to this epoch and stack *)
}

let create ~me ~params ~layers ~xfer =
  {
    me;
    base = params;
    xfer;
    layers;
    params;
    sid = Stack_id.of_layers ~params layers;
    epoch = 0;
    switch_to = None;
    switch_wanted = None;
  }

let layers t = t.layers
let params t = t.params
let sid t = t.sid
let epoch t = t.epoch
let current t = { Side.epoch = t.epoch; id = Stack_id.to_string t.sid }
let is_current t (stack : Side.stack) = stack.id = Stack_id.to_string t.sid

(* The stack of the view this coordinator makes: the one it switches to,
   if any. *)
let next t =
  match t.switch_to with
  | Some (epoch, sid) -> { Side.epoch; id = Stack_id.to_string sid }
  | None -> current t

(* Whether this member can build [stack]. *)
let buildable t (stack : Side.stack) =
  if is_current t stack then Ok ()
  else
    match Stack_id.of_string stack.id with
    | Error e -> Error e
    | Ok sid -> Result.map (fun _ -> ()) (Stack_id.resolve sid ~base:t.base)

(* The next view runs [stack]: build it from the registry. *)
let adopt t (stack : Side.stack) =
  if is_current t stack then (
    t.epoch <- max t.epoch stack.epoch;
    Ok false)
  else
    match Stack_id.of_string stack.id with
    | Error e -> Error e
    | Ok sid -> (
        match Stack_id.resolve sid ~base:t.base with
        | Error e -> Error e
        | Ok (layers, params) ->
            if List.exists (fun l -> Layer.name l = Xfer.name) layers <> t.xfer then
              Error "it adds or removes state transfer (Xfer)"
            else begin
              Log.info (fun m ->
                  m "%s: switches from stack %s (epoch %d) to %s (epoch %d)" t.me
                    (Stack_id.describe t.sid) t.epoch (Stack_id.describe sid) stack.epoch);
              t.layers <- layers;
              t.params <- params;
              t.sid <- sid;
              t.epoch <- stack.epoch;
              Ok true
            end)

let installed t = t.switch_to <- None

(* A partition on another stack: never merge with it. A partition on an
   older stack takes a newer one it can build (a switch made while it was
   apart), then merges; of two partitions that switched to different
   stacks while apart (one epoch), the one whose stack has the lesser
   identity takes the other's. Two stacks as configured (epoch 0) are an
   error: members started with other properties or tunables. *)
let other t ~peer (stack : Side.stack) =
  let theirs =
    match Stack_id.of_string stack.id with Ok s -> Stack_id.describe s | Error _ -> stack.id
  in
  if
    stack.epoch > t.epoch
    || stack.epoch = t.epoch && t.epoch > 0
       && String.compare stack.id (Stack_id.to_string t.sid) > 0
  then begin
    match Stack_id.of_string stack.id with
    | Error reason -> Some (`Unknown (theirs, reason))
    | Ok sid -> (
        match Stack_id.resolve sid ~base:t.base with
        | Error reason -> Some (`Unknown (theirs, reason))
        | Ok _ -> (
            match t.switch_wanted with
            | Some (_, e, s)
              when e > stack.epoch
                   || (e = stack.epoch && String.compare (Stack_id.to_string s) stack.id >= 0) ->
                None
            | _ ->
                Log.info (fun m ->
                    m "%s: %s runs stack %s of epoch %d: switching to it" t.me peer theirs
                      stack.epoch);
                t.switch_wanted <- Some (t.epoch, stack.epoch, sid);
                None))
  end
  else if stack.epoch = 0 && t.epoch = 0 then Some (`Incompatible (Stack_id.describe t.sid, theirs))
  else None

(* A member of this view asks its coordinator for a switch to [stack]. *)
let asked t (stack : Side.stack) =
  if stack.epoch > t.epoch && not (is_current t stack) then
    match Stack_id.of_string stack.id with
    | Ok sid when t.switch_wanted = None -> t.switch_wanted <- Some (t.epoch, stack.epoch, sid)
    | _ -> ()

(* The application asks for a switch to [sid]. *)
let want t sid =
  if not (Stack_id.equal sid t.sid) then t.switch_wanted <- Some (t.epoch, t.epoch + 1, sid)

let wanted t =
  match t.switch_wanted with
  | Some (from, _, sid) when t.epoch > from || Stack_id.equal sid t.sid ->
      t.switch_wanted <- None;
      None
  | Some (_, epoch, sid) -> Some (epoch, sid)
  | None -> None

let start t ~vid (epoch, sid) =
  Log.info (fun m -> m "%s: switching view %s to stack %s" t.me vid (Stack_id.describe sid));
  t.switch_to <- Some (epoch, sid)

let due t ~vid ~coordinator ~idle ~blocked =
  match wanted t with
  | Some (epoch, sid) when coordinator ->
      if (not blocked) && idle () then begin
        start t ~vid (epoch, sid);
        Some `Flush
      end
      else None
  | Some (epoch, sid) when not blocked -> Some (`Ask { Side.epoch; id = Stack_id.to_string sid })
  | _ -> None
