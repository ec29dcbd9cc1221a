let src = Logs.Src.create "consort.stack" ~doc:"Consort stacks"

module Log = (val Logs.src_log src : Logs.LOG)

type app = { deliver : Event.src -> Msg.t -> unit; ctl : Event.up_ctl -> unit }

(* One instantiated layer, its handlers closed over its state. [up] takes a
   message with this layer's header still in front. *)
type node = {
  lname : string;
  up : Event.src -> Msg.t -> unit;
  up_ctl : Event.up_ctl -> unit;
  dn : Event.dst -> Msg.t -> unit;
  dn_ctl : Event.dn_ctl -> unit;
  timer : Time.t -> unit;
  counters : unit -> (string * int) list;
  fast : fnode option; (* the layer's common case of a cast, if it declared one *)
  sfast : fnode option; (* the same for a send, numbered in the frame of sends *)
}

(* A layer's declared common case and its state. The case's handlers are
   called on the state directly (one indirect call each), given the frame
   of fields and this layer's offset in it. *)
and fnode = {
  off : int;
  length : bool;
  size : int array -> int -> int;
  fixed : int; (* the size of the header of a case with no fields, or -1 *)
  case : case;
  push : int array -> int -> Msg.t -> Msg.t; (* push the layered header of these fields *)
  hsize : int array -> int -> int; (* the size of that header *)
  write : int array -> int -> Bytes.t -> int -> int; (* write it at an offset: the offset after *)
  unpack : (int array -> Cstruct.t -> int -> int) option;
      (* read this layer's layered header at an offset into its fields: the
         offset after, or -1 if it is not one of the common case (see
         {!Layer.COMPRESS}); [None]: never *)
  state : unit -> string;
}

and case =
  | Case : {
      s : 's;
      c : ('s, 'h) Layer.case;
      off : int; (* the fnode's, and the case's parts, here to be found in one load *)
      length : bool;
      dn_ok : 's -> Event.dst -> int -> bool;
      dn_part : 's -> Event.dst -> Msg.t -> int -> layered:Layer.above -> int array -> int -> unit;
      dn_after_part :
        's -> Event.dst -> int -> up:(Event.src -> Msg.t -> unit) -> int array -> int -> unit;
      up_ok : 's -> Event.src -> int -> int array -> int -> bool;
      up_part :
        's -> Event.src -> Msg.t -> int -> layered:Layer.above -> int array -> int -> Event.src;
      up_after_part : 's -> Event.src -> int -> int array -> int -> unit;
      layered : Layer.above;
      local : Event.src -> Msg.t -> unit; (* [up] for [dn_after] *)
      dn_fast : bool; (* the part is not {!Layer.nothing_dn_fast}: call it *)
      dn_after : bool;
      up_fast : bool;
      up_after : bool;
    }
      -> case
  | No_case (* the layer declared no case of this kind *)

(* A layer's [live] (see {!Layer.case}) and its state. *)
type live = Live : ('s -> bool) * 's -> live

(* The order in which a walk visits the layers: [next_dn.(i)] is the
   layer visited after [i] going down ([next_dn.(n)] the first, -1 below
   the bottom), [first_up.(i)] the first visited at or above [i] going up
   ([n]: the application). The plain order visits every layer; the short
   one skips the layers whose part of the walk is their [live] alone,
   taken while every such layer is live. *)
type order = { next_dn : int array; first_up : int array }

type t = {
  gen : int ref;
      (* counts calls of the layered handlers of the layers that declare
         [live], the only code that may change what it says *)
  mutable lives : live array; (* the [live] of the layers a cast's short order skips *)
  mutable checked : int; (* [!gen] when [lives] were last read *)
  mutable plain : order;
  mutable short : order;
  mutable order : order; (* [short] if every one of [lives] held at [checked], else [plain] *)
  mutable slives : live array; (* the same for sends *)
  mutable schecked : int;
  mutable splain : order;
  mutable sshort : order;
  mutable sorder : order;
  view : View.t;
  nodes : node array; (* bottom first *)
  mutable cases : case array; (* the nodes' cases of a cast, {!No_case} where none *)
  mutable scases : case array; (* of a send *)
  dues : Deadlines.t; (* when each node asked its timer to run, by node *)
  due_now : int array; (* the nodes whose timers run in this call of [timer] *)
  names : string list;
  fused : bool; (* every layer declared its common case, and the fused path is on *)
  all_fast : bool; (* every layer declared its common case: compressed casts are read *)
  nfields : int;
  mutable frames : int array array;
      (* the fields of the casts going through the bypass, one frame per
         nested cast (an application that casts from its delivery) *)
  mutable depth : int; (* frames in use *)
  lengths : bool array; (* [lengths.(i)]: a layer at or below [i] needs the layered length *)
  mutable fixed_above : int array;
      (* [fixed_above.(i)]: the sizes of the headers of the layers above [i]
         that have no fields, summed when the stack is made *)
  mutable sized_above : fnode array array;
      (* [sized_above.(i)]: the layers above [i] whose header sizes depend
         on their fields *)
  rframe : int array; (* a frame for the headers of layers with no fields (their constants) *)
  mutable fused_sent : int;
  mutable fused_received : int;
  mutable fused_delivered : int; (* casts the bypass delivered to the application *)
  mutable fused_held : int; (* received casts a layer took in on the bypass ({!Layer.held}) *)
  mutable released : int;
      (* casts the top layer passed to the application from its [up_after] on the bypass *)
  mutable releasing : bool; (* the top layer's [up_after] runs *)
  left_dn : int array; (* per layer: casts going down the bypass left to the layered path there *)
  left_up : int array; (* the same going up *)
  reentry : bool array;
      (* [reentry.(i)]: layer [i] has no fields and the headers of those
         above can be read into fields, so a cast that layer [i] sends down
         on its layered path (one it queued) may go on by the fused path
         below it *)
  constant : bool array; (* [constant.(i)]: layer [i] and those above have no fields *)
  reentry_up : bool array; (* [reentry_up.(i)]: the headers of the layers above [i] read back *)
  mutable reentered_up : int;
  above_const : Bytes.t option array; (* the layered headers above [i], when constant *)
  mutable scratch : Cstruct.t; (* the pushed headers of a cast re-entering, read there *)
  mutable reentered : int;
  mutable reentry_refused : int; (* casts whose headers above could not be read back *)
  fused_garbage : int ref;
  ferror : Codec.error -> Msg.t -> unit;
  net : Event.dst -> Msg.t -> unit;
  app : app;
  sfused : bool; (* every layer declared the common case of a send, and the fused path is on *)
  all_send : bool; (* every layer declared the common case of a send: compressed sends are read *)
  snfields : int;
  mutable sframes : int array array; (* the fields of the sends in the bypass, as [frames] *)
  mutable sdepth : int;
  slengths : bool array;
  mutable sfixed_above : int array;
  mutable ssized_above : fnode array array;
  mutable sends_sent : int;
  mutable sends_received : int;
  mutable sends_delivered : int;
  sleft_dn : int array;
  sleft_up : int array;
}

(* The frame of the innermost cast in the bypass (a field kept up to date
   would cost a write barrier per cast). *)
let frame t = t.frames.(if t.depth = 0 then 0 else t.depth - 1)
let sframe t = t.sframes.(if t.sdepth = 0 then 0 else t.sdepth - 1)
let fused_param = "stack.fused"

let () =
  Params.register fused_param (Params.Bool true)
    ~doc:
      "casts take the fused path (one bypass for the whole stack, one compressed header) when \
       every layer declares its common case and the case holds"

(* The compressed header: this tag, the kind (0: a cast, 1: a send), then
   every layer's varying fields for that kind, bottom first, as varints
   (never negative). *)
let tag = 0xC8
(* The first bytes the group runtime gives a meaning: Bottom 0xC1, Side 0xC2, Bundle 0xC4, Seal 0xC5,
   Migrate 0xC6, the daemon's clients 0xC7. *)

let describe layers = String.concat ":" (List.map Layer.name layers)
let names ps = String.concat ", " (List.map Contract.name ps)

let check ?(requires = []) layers =
  let bottom_up = List.rev layers in
  let rec go avail below = function
    | [] -> (
        match List.find_opt (fun r -> not (List.exists (Contract.equal r) avail)) requires with
        | None -> Ok ()
        | Some r ->
            Error
              (Printf.sprintf
                 "stack %s does not provide %s (%s), which the application requires; it provides: \
                  %s"
                 (describe layers) (Contract.name r) (Contract.doc r)
                 (if avail = [] then "nothing" else names avail)))
    | l :: rest -> (
        match
          List.find_opt (fun r -> not (List.exists (Contract.equal r) avail)) (Layer.requires l)
        with
        | Some r ->
            Error
              (Printf.sprintf "layer %s requires %s (%s) below it, but %s provide%s only: %s"
                 (Layer.name l) (Contract.name r) (Contract.doc r)
                 (match below with
                 | [] -> "the transport"
                 | _ -> "the layers under it (" ^ String.concat ":" below ^ ") and the transport")
                 (match below with [] -> "s" | _ -> "")
                 (names avail))
        | None -> go (avail @ Layer.provides l) (Layer.name l :: below) rest)
  in
  if layers = [] then Error "empty stack" else go [ Contract.net ] [] bottom_up

(* A cast whose headers above one layer could not be read back into
   fields (an Order of Total, a control cast) cannot be read back at any
   layer below either: [refused] says so after a failed attempt, and
   [below_refused] holds while that cast goes down the layered path, so
   that the layers below do not try again (the library is single-threaded). *)
let refused = ref false
let below_refused = ref false

let build (type s h) (ctx : Layer.ctx) ~gen nodes dues i ~net ~app ~reenter ~reenter_up
    (module L : Layer.S with type t = s and type header = h) ~(mk : s -> fnode option)
    ~(smk : s -> fnode option) =
  let n = Array.length nodes in
  let garbage = ref 0 in
  let out : L.header Layer.out =
    {
      up =
        (fun src msg ->
          if not (reenter_up src msg) then
            if i = n - 1 then app.deliver src msg else nodes.(i + 1).up src msg);
      up_ctl = (fun e -> if i = n - 1 then app.ctl e else nodes.(i + 1).up_ctl e);
      dn =
        (fun dst h msg ->
          if not (reenter dst h msg) then begin
            let msg = Msg.push L.codec h msg in
            if i = 0 then net dst msg
            else if !refused then begin
              refused := false;
              let prev = !below_refused in
              below_refused := true;
              match nodes.(i - 1).dn dst msg with
              | () -> below_refused := prev
              | exception e ->
                  below_refused := prev;
                  raise e
            end
            else nodes.(i - 1).dn dst msg
          end);
      dn_ctl =
        (fun e ->
          if i > 0 then nodes.(i - 1).dn_ctl e
          else
            match e with
            | Event.Block_req { round } ->
                (* The bottom of the stack: everything below has drained. *)
                nodes.(0).up_ctl (Event.Block_ok { round; parts = [] })
            | _ -> ());
      alarm = (fun at -> if at < Deadlines.get dues i then Deadlines.set dues i at);
    }
  in
  let s = L.create ctx out in
  let ok = L.up s in
  let error e msg =
    incr garbage;
    Log.debug (fun m -> m "%s: dropped a message whose header %a" L.name Codec.pp_error e);
    Msg.release msg
  in
  let fast = mk s and sfast = smk s in
  let declares = function
    | Some { case = Case { c = { live = Some _; _ }; _ }; _ } -> true
    | _ -> false
  in
  let up src msg = Msg.pull_then L.codec msg src ~ok ~error in
  let counters () = ("garbage", !garbage) :: L.counters s in
  if declares fast || declares sfast then
    (* The layer's [live] may change in these: they are counted. *)
    {
      lname = L.name;
      up =
        (fun src msg ->
          incr gen;
          up src msg);
      up_ctl =
        (fun e ->
          incr gen;
          L.up_ctl s e);
      dn =
        (fun dst msg ->
          incr gen;
          L.dn s dst msg);
      dn_ctl =
        (fun e ->
          incr gen;
          L.dn_ctl s e);
      timer =
        (fun now ->
          incr gen;
          L.timer s now);
      counters;
      fast;
      sfast;
    }
  else
    {
      lname = L.name;
      up;
      up_ctl = L.up_ctl s;
      dn = L.dn s;
      dn_ctl = L.dn_ctl s;
      timer = L.timer s;
      counters;
      fast;
      sfast;
    }

(* [m] with the layered headers of the layers from [hi] down to [lo]
   pushed, from the fields in [frame]: the top one first, as the layered
   path pushes them. *)
let cast_node n = n.fast
let send_node n = n.sfast

let push_layered ?(sel = cast_node) nodes frame ~hi ~lo m =
  let m = ref m in
  for j = hi downto lo do
    match sel nodes.(j) with Some f -> m := f.push frame f.off !m | None -> assert false
  done;
  !m

(* [!local_up t j src m] delivers [m] to the layers from [j] up by the
   fused path, with the fields of the cast under way: a layer's own cast,
   delivered locally (defined below). *)
let local_up : (t -> int -> Event.src -> Msg.t -> unit) ref = ref (fun _ _ _ m -> Msg.release m)

(* [!reenter_dn t i m]: the cast [m], which layer [i] sends down on its
   layered path with the layered headers of the layers above it in front,
   goes on by the fused path below [i] if it can, and then is true
   (defined below). *)
let reenter_dn : (t -> int -> Msg.t -> bool) ref = ref (fun _ _ _ -> false)

(* [!reenter_up t i src m]: the same going up: a cast layer [i] passes up
   on its layered path (one it held for a gap) goes on by the fused path
   above [i] if it can. *)
let reenter_up : (t -> int -> Event.src -> Msg.t -> bool) ref = ref (fun _ _ _ _ -> false)
let no_reenter_up _ _ = false
let no_reenter _ _ _ = false

(* Headers are plain data: equality may only fail to apply to a header
   holding a function, which is then not the constant. *)
let same_header h k = h == k || try h = k with Invalid_argument _ -> false

(* The layered headers of the layers above one layer, as bytes, for the
   fields they were last made from: in the common case those fields do
   not change (they are constants above Mnak in the default stack), and
   a copy a layer keeps gets them in one push. The cache covers the
   layers up to the first above that has fields (the fields [from] to
   [upto] of the frame); that one and those above it are pushed from
   their fields each time (Total's place, above Mnak in a stack with
   Total, changes with every cast). *)
type cache = {
  mutable key : int array;
  mutable bytes : Bytes.t;
  from : int;
  upto : int;
  mutable valid : bool;
}

let rec same_key c frame n k =
  k >= n || (frame.(c.from + k) = c.key.(k) && same_key c frame n (k + 1))

let refresh sel c nodes frame ~hi ~lo =
  let n = c.upto - c.from in
  let same = c.valid && same_key c frame n 0 in
  if not same then begin
    let e = push_layered ~sel nodes frame ~hi ~lo (Msg.empty ()) in
    c.bytes <- Bytes.unsafe_of_string (Msg.to_string e);
    Msg.release e;
    c.key <- Array.sub frame c.from n;
    c.valid <- true
  end

(* The headers of the layers from [lo] up, as bytes of the exact size (a
   copy a layer keeps holds no more than its headers until it is stable):
   those of [lo] to [hi] from the cache, then those of the layers above
   [hi] made from their fields. *)
let head_bytes sel c nodes frame ~hi ~lo =
  refresh sel c nodes frame ~hi ~lo;
  let top = Array.length nodes - 1 in
  if hi >= top then c.bytes
  else begin
    let cached = Bytes.length c.bytes in
    let size = ref cached in
    for j = hi + 1 to top do
      match sel nodes.(j) with
      | Some f -> size := !size + f.hsize frame f.off
      | None -> assert false
    done;
    let b = Bytes.create !size in
    Bytes.blit c.bytes 0 b 0 cached;
    let pos = ref cached in
    for j = hi + 1 to top do
      match sel nodes.(j) with Some f -> pos := f.write frame f.off b !pos | None -> assert false
    done;
    b
  end

(* [m] with the headers of the layers from [lo] up in front. *)
let push_cached sel c nodes frame ~hi ~lo m =
  let b = head_bytes sel c nodes frame ~hi ~lo in
  if Bytes.length b = 0 then m else Msg.push_bytes b m

(* [!send_local t j src m]: as {!local_up}, for a send. *)
let send_local : (t -> int -> Event.src -> Msg.t -> unit) ref = ref (fun _ _ _ m -> Msg.release m)

(* A layer's case [c] and its state [s], made a node's part of the fused
   path: [sel] finds the parts of the same kind in the other nodes, [cur]
   the frame of the innermost message of that kind under way. *)
let fnode_of (type s h) nodes i ~sel ~cur ~off ~split ~local ~unpack ~(codec : h Codec.t)
    ~(state : s -> string) (c : (s, h) Layer.case) (s : s) =
  (* [layered] for a copy the layer keeps: the headers of the layers
     above it, from the frame the case runs with: those from the layer
     [sp] up made from their fields, the others cached. *)
  let sp, upto = split in
  let cache = { key = [||]; bytes = Bytes.empty; from = off + c.nfields; upto; valid = false } in
  let layered =
    {
      Layer.push = (fun m -> push_cached sel cache nodes (cur ()) ~hi:(sp - 1) ~lo:(i + 1) m);
      head = (fun () -> head_bytes sel cache nodes (cur ()) ~hi:(sp - 1) ~lo:(i + 1));
    }
  in
  {
    off;
    length = c.length;
    size = c.size;
    fixed = (if c.nfields = 0 then c.size [||] 0 else -1);
    case =
      Case
        {
          s;
          c;
          off;
          length = c.length;
          dn_ok = c.dn_ok;
          dn_part = c.dn_fast;
          dn_after_part = c.dn_after;
          up_ok = c.up_ok;
          up_part = c.up_fast;
          up_after_part = c.up_after;
          layered;
          local;
          dn_fast = c.dn_fast != Layer.nothing_dn_fast;
          dn_after = c.dn_after != Layer.nothing_dn_after;
          up_fast = c.up_fast != Layer.nothing_up_fast;
          up_after = c.up_after != Layer.nothing_up_after;
        };
    push = (fun a o m -> Msg.push codec (c.expand a o) m);
    hsize = (fun a o -> Codec.size codec (c.expand a o));
    write = (fun a o b pos -> Codec.encode_into codec b pos (c.expand a o));
    unpack;
    state = (fun () -> state s);
  }

let instantiate_fast (type s h) ctx ~gen nodes dues i ~net ~app ~off ~frames ~split ~soff ~ssplit l
    (module F : Layer.FAST with type t = s and type header = h) (send : (s, h) Layer.case option) =
  let c = F.cast in
  let unpack =
    match Layer.find_compress l with
    | Some (module C : Layer.COMPRESS) ->
        Some
          (fun frame cs pos ->
            match Codec.decode C.codec cs pos with
            | Ok (h, next) when C.compress h frame off -> next
            | Ok _ | Error _ -> -1)
    | None when c.nfields = 0 ->
        let k = c.expand [||] 0 in
        Some
          (fun _ cs pos ->
            match Codec.decode F.codec cs pos with
            | Ok (h, next) when same_header h k -> next
            | Ok _ | Error _ -> -1)
    | None -> None
  in
  let mk s =
    Some
      (fnode_of nodes i ~sel:cast_node
         ~cur:(fun () -> frame (Lazy.force frames))
         ~off ~split
         ~local:(fun src m -> !local_up (Lazy.force frames) (i + 1) src m)
         ~unpack ~codec:F.codec ~state:F.state c s)
  in
  let smk =
    match send with
    | Some sc when soff >= 0 ->
        fun s ->
          Some
            (fnode_of nodes i ~sel:send_node
               ~cur:(fun () -> sframe (Lazy.force frames))
               ~off:soff ~split:ssplit
               ~local:(fun src m -> !send_local (Lazy.force frames) (i + 1) src m)
               ~unpack:None ~codec:F.codec ~state:F.state sc s)
    | _ -> fun _ -> None
  in
  let reenter =
    if c.nfields = 0 && i > 0 then begin
      let k = c.expand [||] 0 in
      fun dst h msg -> dst == Event.Cast && same_header h k && !reenter_dn (Lazy.force frames) i msg
    end
    else no_reenter
  in
  let reenter_up src msg = !reenter_up (Lazy.force frames) i src msg in
  build ctx ~gen nodes dues i ~net ~app ~reenter ~reenter_up (module F) ~mk ~smk

let no_order = { next_dn = [||]; first_up = [||] }

(* The orders of the walks of one kind (see {!order}): a layer other than
   the lowest is skipped going down if its part is [live] alone (it
   declared [live] and has no [dn_fast] or [dn_after]), going up if it has
   no [up_fast] or [up_after]. *)
let orders sel nodes =
  let n = Array.length nodes in
  let skips i dn =
    i > 0
    &&
    match sel nodes.(i) with
    | Some { length; case = Case { c; dn_fast; dn_after; up_fast; up_after; _ }; _ } -> (
        match c.live with
        | Some _ ->
            (not length)
            &&
            if dn then (not dn_fast) && not dn_after else c.up_live && (not up_fast) && not up_after
        | None -> false)
    | Some { case = No_case; _ } | None -> false
  in
  let lives =
    List.filter_map
      (fun i ->
        match sel nodes.(i) with
        | Some { case = Case { s; c = { live = Some f; _ }; _ }; _ }
          when skips i true || skips i false ->
            Some (Live (f, s))
        | _ -> None)
      (List.init n Fun.id)
  in
  let plain =
    { next_dn = Array.init (n + 1) (fun i -> i - 1); first_up = Array.init (n + 1) Fun.id }
  in
  let dn = Array.make (n + 1) (-1) and up = Array.make (n + 1) n in
  for i = 1 to n do
    let j = ref (i - 1) in
    while !j >= 0 && skips !j true do
      decr j
    done;
    dn.(i) <- !j
  done;
  for k = n - 1 downto 0 do
    up.(k) <- (if skips k false then up.(k + 1) else k)
  done;
  (Array.of_list lives, plain, { next_dn = dn; first_up = up })

let instantiate ctx ~gen nodes dues i ~net ~app ~off ~frames ~split ~soff ~ssplit l =
  let fast m send =
    instantiate_fast ctx ~gen nodes dues i ~net ~app ~off ~frames ~split ~soff ~ssplit l m send
  in
  match if off >= 0 then Layer.find_send l else None with
  | Some (module S : Layer.FAST_SEND) ->
      fast (module S : Layer.FAST with type t = S.t and type header = S.header) (Some S.send)
  | None -> (
      match if off >= 0 then Layer.find_fast l else None with
      | Some (module F : Layer.FAST) -> fast (module F) None
      | None ->
          let module L = (val l : Layer.S) in
          build ctx ~gen nodes dues i ~net ~app ~reenter:no_reenter ~reenter_up:no_reenter_up
            (module L)
            ~mk:(fun _ -> None)
            ~smk:(fun _ -> None))

let fused_error count e msg =
  incr count;
  Log.debug (fun m -> m "dropped a compressed datagram: %a" Codec.pp_error e);
  Msg.release msg

(* Reads a compressed header: the kind, its fields in [frame] (a cast) or
   [sframe] (a send, where the stack reads them). *)
let read_codec frame sframe =
  Codec.custom ~name:"fused"
    ~size:(fun _ -> 0)
    ~write:(fun _ _ -> invalid_arg "read only")
    ~read:(fun r ->
      if Codec.read Codec.uint8 r <> tag then Codec.fail "not a compressed header";
      match (Codec.read Codec.uint8 r, sframe) with
      | 0, _ ->
          Codec.read_varints r frame;
          0
      | 1, Some sframe ->
          Codec.read_varints r sframe;
          1
      | _ -> Codec.fail "unknown kind")

(* Per layer, the sizes of the fieldless headers above it, summed, and the
   layers above it whose header sizes must be asked of their fields. *)
let above_sums sel nodes =
  let n = Array.length nodes in
  let fixed = Array.make n 0 and sized = Array.make n [||] in
  for i = n - 2 downto 0 do
    match sel nodes.(i + 1) with
    | Some f when f.fixed >= 0 ->
        fixed.(i) <- fixed.(i + 1) + f.fixed;
        sized.(i) <- sized.(i + 1)
    | Some f ->
        fixed.(i) <- fixed.(i + 1);
        sized.(i) <- Array.append [| f |] sized.(i + 1)
    | None ->
        fixed.(i) <- fixed.(i + 1);
        sized.(i) <- sized.(i + 1)
  done;
  (fixed, sized)

let create ?requires ?fused (ctx : Layer.ctx) layers ~net ~app =
  match check ?requires layers with
  | Error _ as e -> e
  | Ok () ->
      let bottom_up = Array.of_list (List.rev layers) in
      let n = Array.length bottom_up in
      let all_fast =
        Array.for_all Layer.is_fast bottom_up
        &&
        match Layer.find_fast bottom_up.(0) with
        | Some (module F : Layer.FAST) -> F.cast.framed
        | None -> false
      in
      let fused =
        (match fused with Some b -> b | None -> Params.bool ctx.params fused_param) && all_fast
      in
      let offs = Array.make n (-1) in
      let nfields = ref 0 in
      if all_fast then
        Array.iteri
          (fun i l ->
            match Layer.find_fast l with
            | Some (module F : Layer.FAST) ->
                offs.(i) <- !nfields;
                nfields := !nfields + F.cast.nfields
            | None -> ())
          bottom_up;
      let frames = Array.init 4 (fun _ -> Array.make !nfields 0)
      and rframe = Array.make !nfields 0 in
      (* The same for sends, where every layer declared their case. *)
      let all_send = all_fast && Array.for_all (fun l -> Layer.find_send l <> None) bottom_up in
      let all_send =
        all_send
        &&
        match Layer.find_send bottom_up.(0) with
        | Some (module S : Layer.FAST_SEND) -> S.send.framed
        | None -> false
      in
      let soffs = Array.make n (-1) and snfields = ref 0 in
      let slengths = Array.make n false in
      if all_send then
        Array.iteri
          (fun i l ->
            match Layer.find_send l with
            | Some (module S : Layer.FAST_SEND) ->
                soffs.(i) <- !snfields;
                snfields := !snfields + S.send.nfields;
                if S.send.length then
                  for j = i to n - 1 do
                    slengths.(j) <- true
                  done
            | None -> ())
          bottom_up;
      let lengths = Array.make n false in
      if all_fast then
        Array.iteri
          (fun i l ->
            match Layer.find_fast l with
            | Some (module F : Layer.FAST) ->
                if F.cast.length then
                  for j = i to n - 1 do
                    lengths.(j) <- true
                  done
            | None -> ())
          bottom_up;
      let reentry = Array.make n false and constant = Array.make n false in
      let reentry_up = Array.make n false in
      if all_fast then begin
        let none k = offs.(k) = if k + 1 < n then offs.(k + 1) else !nfields in
        let unpacks k = none k || Option.is_some (Layer.find_compress bottom_up.(k)) in
        let above = ref true in
        for i = n - 1 downto 0 do
          reentry.(i) <- none i && !above;
          reentry_up.(i) <- i < n - 1 && !above;
          constant.(i) <- none i && (i = n - 1 || constant.(i + 1));
          above := !above && unpacks i
        done
      end;
      let fused_garbage = ref 0 in
      let dummy =
        {
          lname = "";
          up = (fun _ _ -> ());
          up_ctl = ignore;
          dn = (fun _ _ -> ());
          dn_ctl = ignore;
          timer = ignore;
          counters = (fun () -> []);
          fast = None;
          sfast = None;
        }
      in
      let nodes = Array.make n dummy in
      let gen = ref 0 in
      let dues = Deadlines.create n in
      let st =
        lazy
          {
            gen;
            lives = [||];
            checked = -1;
            plain = no_order;
            short = no_order;
            order = no_order;
            slives = [||];
            schecked = -1;
            splain = no_order;
            sshort = no_order;
            sorder = no_order;
            view = ctx.view;
            nodes;
            cases = [||];
            scases = [||];
            dues;
            due_now = Array.make n 0;
            names = List.map Layer.name layers;
            fused;
            all_fast;
            nfields = !nfields;
            frames;
            depth = 0;
            lengths;
            fixed_above = [||];
            sized_above = [||];
            rframe;
            fused_sent = 0;
            fused_received = 0;
            fused_delivered = 0;
            fused_held = 0;
            released = 0;
            releasing = false;
            left_dn = Array.make n 0;
            left_up = Array.make n 0;
            reentry;
            constant;
            reentry_up;
            reentered_up = 0;
            above_const = Array.make n None;
            scratch = Cstruct.create 64;
            reentered = 0;
            reentry_refused = 0;
            fused_garbage;
            ferror = fused_error fused_garbage;
            net;
            app;
            sfused = fused && all_send;
            all_send;
            snfields = !snfields;
            sframes = Array.init 2 (fun _ -> Array.make !snfields 0);
            sdepth = 0;
            slengths;
            sfixed_above = [||];
            ssized_above = [||];
            sends_sent = 0;
            sends_received = 0;
            sends_delivered = 0;
            sleft_dn = Array.make n 0;
            sleft_up = Array.make n 0;
          }
      in
      (* For each layer, the first layer above it whose case has fields,
         and where they start in the frame. *)
      let nf i =
        match Layer.find_fast bottom_up.(i) with
        | Some (module F : Layer.FAST) -> F.cast.nfields
        | None -> 0
      in
      let split i =
        let s = ref (i + 1) in
        while !s < n && nf !s = 0 do
          incr s
        done;
        (!s, if !s < n then offs.(!s) else !nfields)
      in
      let snf i =
        match Layer.find_send bottom_up.(i) with
        | Some (module S : Layer.FAST_SEND) -> S.send.nfields
        | None -> 0
      in
      let ssplit i =
        let s = ref (i + 1) in
        while !s < n && snf !s = 0 do
          incr s
        done;
        (!s, if !s < n then soffs.(!s) else !snfields)
      in
      Array.iteri
        (fun i l ->
          nodes.(i) <-
            instantiate ctx ~gen nodes dues i ~net ~app ~off:offs.(i) ~frames:st ~split:(split i)
              ~soff:soffs.(i) ~ssplit:(ssplit i) l)
        bottom_up;
      let t = Lazy.force st in
      let fixed, sized = above_sums cast_node nodes in
      t.fixed_above <- fixed;
      t.sized_above <- sized;
      let fixed, sized = above_sums send_node nodes in
      t.sfixed_above <- fixed;
      t.ssized_above <- sized;
      let cases sel =
        Array.map (fun n -> match sel n with Some f -> f.case | None -> No_case) nodes
      in
      t.cases <- cases cast_node;
      t.scases <- cases send_node;
      let lives, plain, short = orders cast_node nodes in
      t.lives <- lives;
      t.plain <- plain;
      t.short <- short;
      t.order <- plain;
      let lives, plain, short = orders send_node nodes in
      t.slives <- lives;
      t.splain <- plain;
      t.sshort <- short;
      t.sorder <- plain;
      Ok t

(* {1 The fused path}

   Down: from the top, each layer whose case holds does its part and the
   cast goes on to the next; the first whose case does not hold gets the
   cast with the layered headers of the layers above pushed, and the rest
   is the layered path. Under the bottom, the cast leaves with the
   compressed header. What each layer does after the cast went on runs as
   the calls return, bottom first, as in the layered path. Up is the
   same from the bottom, the layered headers of the rest pushed back from
   the fields where a case does not hold (a gap, a flush). *)

(* A frame for a cast entering the bypass: the next one, or a fresh array
   when casts nest deeper than expected. *)
let enter t =
  let d = t.depth in
  if d = Array.length t.frames then
    t.frames <- Array.init (2 * d) (fun k -> if k < d then t.frames.(k) else Array.make t.nfields 0);
  t.depth <- d + 1;
  t.frames.(d)

let leave t =
  t.depth <- t.depth - 1;
  if t.depth = 0 then t.releasing <- false

(* Bytes of the layered headers of the layers above [i], from their fields:
   with the message's length (which the fused path does not change), the
   layered length at [i], counted only for a layer that needs it. *)
let above t frame i =
  let v = t.sized_above.(i) in
  let n = ref t.fixed_above.(i) in
  for k = 0 to Array.length v - 1 do
    let f = Array.unsafe_get v k in
    n := !n + f.size frame f.off
  done;
  !n

(* The order of the next walk of a cast: the short one if every layer it
   skips is live, its [live] read again only when some layered handler ran
   since it was last read. *)
let all_live lives =
  let rec go k =
    k = Array.length lives || ((match lives.(k) with Live (f, s) -> f s) && go (k + 1))
  in
  go 0

let order t =
  let g = !(t.gen) in
  if t.checked <> g then begin
    t.checked <- g;
    t.order <- (if all_live t.lives then t.short else t.plain)
  end;
  t.order

let sorder t =
  let g = !(t.gen) in
  if t.schecked <> g then begin
    t.schecked <- g;
    t.sorder <- (if all_live t.slives then t.sshort else t.splain)
  end;
  t.sorder

(* [mlen]: the message's length, where some layer needs the layered
   length. *)
(* The first layer visited at or above [k] going up, for a cast from
   [src]: a layer is skipped only for a cast from a member. *)
let next_up o src k = match src with Event.Cast_from _ -> o.first_up.(k) | _ -> k
let next_sup o src k = match src with Event.Send_from _ -> o.first_up.(k) | _ -> k

let rec fused_dn t frame i dst msg mlen =
  if i < 0 then begin
    t.fused_sent <- t.fused_sent + 1;
    t.net dst (Msg.push_fields tag 0 frame msg)
  end
  else
    match t.cases.(i) with
    | Case { s; off; length; dn_ok; dn_part; dn_after_part; layered; local; dn_fast; dn_after; _ }
      ->
        let len = if length then mlen + above t frame i else -1 in
        if dn_ok s dst len then begin
          if dn_fast then dn_part s dst msg len ~layered frame off;
          fused_dn t frame t.order.next_dn.(i) dst msg mlen;
          if dn_after then dn_after_part s dst len ~up:local frame off
        end
        else dn_layered t frame i dst msg
    | No_case -> dn_layered t frame i dst msg

and dn_layered t frame i dst msg =
  t.left_dn.(i) <- t.left_dn.(i) + 1;
  let msg = push_layered t.nodes frame ~hi:(Array.length t.nodes - 1) ~lo:(i + 1) msg in
  t.nodes.(i).dn dst msg

let rec fused_up t frame i src msg mlen =
  if i = Array.length t.nodes then begin
    t.fused_delivered <- t.fused_delivered + 1;
    t.app.deliver src msg
  end
  else
    match t.cases.(i) with
    | Case { s; off; length; up_ok; up_part; up_after_part; layered; up_fast; up_after; _ } ->
        let len = if length then mlen + above t frame i else -1 in
        if up_ok s src len frame off then begin
          let src' = if up_fast then up_part s src msg len ~layered frame off else src in
          if src' == Layer.held then t.fused_held <- t.fused_held + 1
          else fused_up t frame (next_up t.order src' (i + 1)) src' msg mlen;
          if up_after then
            if i = Array.length t.nodes - 1 then begin
              (* What the top layer passes up from here was taken in on the
                 bypass or is released by what came by it. *)
              let prev = t.releasing in
              t.releasing <- true;
              up_after_part s src len frame off;
              t.releasing <- prev
            end
            else up_after_part s src len frame off
        end
        else up_layered t frame i src msg
    | No_case -> up_layered t frame i src msg

(* Fields from the network that no layered header can hold (a number too
   large for its codec) make the datagram garbage. *)
and up_layered t frame i src msg =
  t.left_up.(i) <- t.left_up.(i) + 1;
  let m = ref msg in
  match
    for j = Array.length t.nodes - 1 downto i do
      match t.nodes.(j).fast with Some f -> m := f.push frame f.off !m | None -> assert false
    done
  with
  | () -> t.nodes.(i).up src !m
  | exception Invalid_argument e -> t.ferror (`Malformed e) !m

let mlen t msg = if t.lengths.(Array.length t.nodes - 1) then Msg.length msg else 0

let () =
  local_up := fun t j src msg -> fused_up t (frame t) (next_up (order t) src j) src msg (mlen t msg)

let top t = t.nodes.(Array.length t.nodes - 1)

let cast t msg =
  if t.fused then begin
    let frame = enter t in
    match fused_dn t frame (order t).next_dn.(Array.length t.nodes) Event.Cast msg (mlen t msg) with
    | () -> leave t
    | exception e ->
        leave t;
        raise e
  end
  else (top t).dn Event.Cast msg

(* A cast a layer queued and now sends down (Mflow, as credit comes back)
   goes by the layered path from there in a stack without the fused path.
   In a fused stack, where the layer and those above it have no fields,
   the layered headers above it are the constants the fused path would
   make: they are taken off again, and the cast goes on below the layer
   by the fused path, with the compressed header. Receivers then take it
   by their fused path too. *)
let above_const t i =
  match t.above_const.(i) with
  | Some b -> b
  | None ->
      let e =
        push_layered t.nodes t.rframe ~hi:(Array.length t.nodes - 1) ~lo:(i + 1) (Msg.empty ())
      in
      let b = Bytes.unsafe_of_string (Msg.to_string e) in
      Msg.release e;
      t.above_const.(i) <- Some b;
      b

(* [run t f]: [f ()] in the frame just entered, which is then left. *)
let run t f =
  match f () with
  | () ->
      leave t;
      true
  | exception e ->
      leave t;
      raise e

let go_below t frame i msg =
  t.reentered <- t.reentered + 1;
  run t (fun () -> fused_dn t frame (order t).next_dn.(i) Event.Cast msg (mlen t msg))

(* Where a layer above has fields (Total's place), each header above [i]
   is read into [frame] from a copy of the pushed bytes: the bytes read,
   or -1 if one is not of the common case. A cast received layered has
   no pushed headers (they are in its body): -1 at once, where reading
   would fail on the first header, past the end (Cstruct's bounds error,
   a formatted message, at every layer the cast passes). *)
let read_above t frame i msg =
  let buf, hoff, hlen = Msg.headers msg in
  if hlen = 0 then -1
  else begin
    if hlen > Cstruct.length t.scratch then
      t.scratch <- Cstruct.create (max hlen (2 * Cstruct.length t.scratch));
    Cstruct.blit_from_bytes buf hoff t.scratch 0 hlen;
    let cs = Cstruct.sub t.scratch 0 hlen in
    let n = Array.length t.nodes in
    let rec go k pos =
      if k = n || pos < 0 then pos
      else
        match t.nodes.(k).fast with
        | Some { unpack = Some u; _ } -> go (k + 1) (u frame cs pos)
        | _ -> -1
    in
    go (i + 1) 0
  end

(* [take_above t i msg go]: [go frame msg'] with the headers of the layers
   above [i] read into a frame just entered and taken off [msg] (constant
   bytes compared, or each read back); [false] if they do not read back. *)
let take_above t i msg go =
  if i = Array.length t.nodes - 1 || t.constant.(i + 1) then
    match Msg.pull_bytes (above_const t i) msg with None -> false | Some msg -> go (enter t) msg
  else
    let frame = enter t in
    let used = read_above t frame i msg in
    if used < 0 then begin
      leave t;
      false
    end
    else go frame (Msg.pull_pushed used msg)

let () =
  reenter_dn :=
    fun t i msg ->
      t.fused && t.reentry.(i) && (not !below_refused)
      && (take_above t i msg (fun frame msg -> go_below t frame i msg)
         ||
         (t.reentry_refused <- t.reentry_refused + 1;
          refused := true;
          false))

(* Going up, a cast a layer held (Mnak, for a gap) and passes on later
   carries the layered headers of the layers above it, pushed back from
   the fields when it left the bypass: read back, they let it go on by
   the fused path above that layer. A cast received layered has them in
   its body, and goes on layered. *)
let go_above t frame i src msg =
  t.reentered_up <- t.reentered_up + 1;
  run t (fun () -> fused_up t frame (next_up (order t) src (i + 1)) src msg (mlen t msg))

let () =
  reenter_up :=
    fun t i src msg ->
      if t.releasing && i = Array.length t.nodes - 1 then t.released <- t.released + 1;
      t.fused && t.reentry_up.(i)
      && (match src with Event.Cast_from _ -> true | _ -> false)
      && take_above t i msg (fun frame msg -> go_above t frame i src msg)

(* {1 The fused path of a send}

   The same as a cast's, with the layers' send cases, numbered in a frame
   of their own, and kind 1 in the compressed header. A send has no
   re-entry: one a layer queued (Pt2ptw's window) goes on layered. *)

let senter t =
  let d = t.sdepth in
  if d = Array.length t.sframes then
    t.sframes <-
      Array.init (2 * d) (fun k -> if k < d then t.sframes.(k) else Array.make t.snfields 0);
  t.sdepth <- d + 1;
  t.sframes.(d)

let sleave t = t.sdepth <- t.sdepth - 1

let sabove t frame i =
  let v = t.ssized_above.(i) in
  let n = ref t.sfixed_above.(i) in
  for k = 0 to Array.length v - 1 do
    let f = Array.unsafe_get v k in
    n := !n + f.size frame f.off
  done;
  !n

let smlen t msg = if t.slengths.(Array.length t.nodes - 1) then Msg.length msg else 0

let rec send_dn t frame i dst msg mlen =
  if i < 0 then begin
    t.sends_sent <- t.sends_sent + 1;
    t.net dst (Msg.push_fields tag 1 frame msg)
  end
  else
    match t.scases.(i) with
    | Case { s; off; length; dn_ok; dn_part; dn_after_part; layered; local; dn_fast; dn_after; _ }
      ->
        let len = if length then mlen + sabove t frame i else -1 in
        if dn_ok s dst len then begin
          if dn_fast then dn_part s dst msg len ~layered frame off;
          send_dn t frame t.sorder.next_dn.(i) dst msg mlen;
          if dn_after then dn_after_part s dst len ~up:local frame off
        end
        else send_dn_layered t frame i dst msg
    | No_case -> send_dn_layered t frame i dst msg

and send_dn_layered t frame i dst msg =
  t.sleft_dn.(i) <- t.sleft_dn.(i) + 1;
  let msg =
    push_layered ~sel:send_node t.nodes frame ~hi:(Array.length t.nodes - 1) ~lo:(i + 1) msg
  in
  t.nodes.(i).dn dst msg

let rec send_up t frame i src msg mlen =
  if i = Array.length t.nodes then begin
    t.sends_delivered <- t.sends_delivered + 1;
    t.app.deliver src msg
  end
  else
    match t.scases.(i) with
    | Case { s; off; length; up_ok; up_part; up_after_part; layered; up_fast; up_after; _ } ->
        let len = if length then mlen + sabove t frame i else -1 in
        if up_ok s src len frame off then begin
          let src' = if up_fast then up_part s src msg len ~layered frame off else src in
          if src' != Layer.held then send_up t frame (next_sup t.sorder src' (i + 1)) src' msg mlen;
          if up_after then up_after_part s src len frame off
        end
        else send_up_layered t frame i src msg
    | No_case -> send_up_layered t frame i src msg

and send_up_layered t frame i src msg =
  t.sleft_up.(i) <- t.sleft_up.(i) + 1;
  let m = ref msg in
  match
    for j = Array.length t.nodes - 1 downto i do
      match t.nodes.(j).sfast with Some f -> m := f.push frame f.off !m | None -> assert false
    done
  with
  | () -> t.nodes.(i).up src !m
  | exception Invalid_argument e -> t.ferror (`Malformed e) !m

let () =
  send_local :=
    fun t j src msg -> send_up t (sframe t) (next_sup (sorder t) src j) src msg (smlen t msg)

let send t rank msg =
  if t.sfused then begin
    let frame = senter t in
    match
      send_dn t frame (sorder t).next_dn.(Array.length t.nodes) (Event.Send rank) msg (smlen t msg)
    with
    | () -> sleave t
    | exception e ->
        sleave t;
        raise e
  end
  else (top t).dn (Event.Send rank) msg

let dn_ctl t e = (top t).dn_ctl e

(* A compressed datagram's fields are read in place into the frame the
   bypass runs with; one that does not decode is garbage. *)
let recv_send t msg =
  let frame = senter t in
  match Msg.pull_fields 2 frame msg with
  | exception Codec.Decode_error e ->
      sleave t;
      t.ferror e msg
  | msg -> (
      t.sends_received <- t.sends_received + 1;
      match send_up t frame (sorder t).first_up.(0) Event.Raw msg (smlen t msg) with
      | () -> sleave t
      | exception e ->
          sleave t;
          raise e)

let recv_cast t msg =
  let frame = enter t in
  match Msg.pull_fields 2 frame msg with
  | exception Codec.Decode_error e ->
      leave t;
      t.ferror e msg
  | msg -> (
      t.fused_received <- t.fused_received + 1;
      match fused_up t frame (order t).first_up.(0) Event.Raw msg (mlen t msg) with
      | () -> leave t
      | exception e ->
          leave t;
          raise e)

let recv t msg =
  if t.all_fast && Msg.first_byte msg = tag then
    match Msg.byte_at msg 1 with
    | 0 -> recv_cast t msg
    | 1 when t.all_send -> recv_send t msg
    | -1 -> t.ferror (`Truncated "fused") msg
    | _ -> t.ferror (`Malformed "fused: unknown kind") msg
  else t.nodes.(0).up Event.Raw msg

(* Only the layers whose alarm is due run, bottom first; each asks again
   for what it still needs. A layer's timer may make another ask for a
   time already past: [next_alarm] then says so and the driver comes back
   at once. *)
let timer t now =
  let k = Deadlines.take_due t.dues now t.due_now in
  let d = t.due_now in
  for j = 1 to k - 1 do
    (* Bottom first: an insertion sort of the few due. *)
    let x = d.(j) in
    let m = ref j in
    while !m > 0 && d.(!m - 1) > x do
      d.(!m) <- d.(!m - 1);
      decr m
    done;
    d.(!m) <- x
  done;
  for j = 0 to k - 1 do
    t.nodes.(t.due_now.(j)).timer now
  done

let next_alarm t = Deadlines.next t.dues
let view t = t.view
let layers t = t.names

(* A compressed datagram that does not decode is the bottom layer's
   garbage, as a layered one would be. *)
let counters t =
  List.rev
    (Array.to_list
       (Array.mapi
          (fun i n ->
            let c = n.counters () in
            ( n.lname,
              if i = 0 then
                List.map
                  (fun (k, v) -> if k = "garbage" then (k, v + !(t.fused_garbage)) else (k, v))
                  c
              else c ))
          t.nodes))

let fused t = t.fused

let states t =
  List.rev
    (Array.to_list
       (Array.map
          (fun n -> (n.lname, match n.fast with Some f -> f.state () | None -> ""))
          t.nodes))

let fused_counters t =
  let left which a =
    List.concat
      (List.rev
         (Array.to_list
            (Array.mapi
               (fun i k ->
                 if k = 0 then []
                 else [ (Printf.sprintf "layered from %s %s" t.nodes.(i).lname which, k) ])
               a)))
  in
  [
    ("sent", t.fused_sent);
    ("received", t.fused_received);
    ("garbage", !(t.fused_garbage));
    ("delivered", t.fused_delivered);
    ("held", t.fused_held);
    ("released", t.released);
    ("reentered", t.reentered);
    ("reentered_up", t.reentered_up);
    ("reentry_refused", t.reentry_refused);
    ("sends_on", Bool.to_int t.sfused);
    ("sends_sent", t.sends_sent);
    ("sends_received", t.sends_received);
    ("sends_delivered", t.sends_delivered);
  ]
  @ left "down" t.left_dn @ left "up" t.left_up @ left "send down" t.sleft_dn
  @ left "send up" t.sleft_up

let expand t msg =
  if (not t.all_fast) || Msg.first_byte msg <> tag then Ok msg
  else
    let frame = Array.make t.nfields 0 and sframe = Array.make t.snfields 0 in
    match Msg.pull (read_codec frame (if t.all_send then Some sframe else None)) msg with
    | Error e -> Error e
    | Ok (0, msg) -> Ok (push_layered t.nodes frame ~hi:(Array.length t.nodes - 1) ~lo:0 msg)
    | Ok (_, msg) ->
        Ok (push_layered ~sel:send_node t.nodes sframe ~hi:(Array.length t.nodes - 1) ~lo:0 msg)
