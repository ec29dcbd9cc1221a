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

(* One lane of the fused path: casts (kind 0 in the compressed header) or
   sends (kind 1). The two run the same walks over the layers' cases of
   their kind, each with its own frames of fields, order and counters. *)
type lane = {
  kind : int; (* in the compressed header: 0 a cast, 1 a send *)
  on : bool; (* every layer declared its case of this kind, and the fused path is on *)
  sel : node -> fnode option; (* a node's part of this kind *)
  nodes : node array; (* the stack's, bottom first *)
  net : Event.dst -> Msg.t -> unit;
  app : app;
  ferror : Codec.error -> Msg.t -> unit;
  gen : int ref;
      (* counts calls of the layered handlers of the layers that declare
         [live], the only code that may change what it says (the stack's,
         shared by its two lanes) *)
  mutable lives : live array; (* the [live] of the layers the short order skips *)
  mutable checked : int; (* [!gen] when [lives] were last read *)
  mutable plain : order;
  mutable short : order;
  mutable order : order; (* [short] if every one of [lives] held at [checked], else [plain] *)
  mutable cases : case array; (* the nodes' cases of this kind, {!No_case} where none *)
  nfields : int;
  mutable frames : int array array;
      (* the fields of the messages going through the bypass, one frame per
         nested one (an application that casts from its delivery) *)
  mutable depth : int; (* frames in use *)
  lengths : bool array; (* [lengths.(i)]: a layer at or below [i] needs the layered length *)
  mutable fixed_above : int array;
      (* [fixed_above.(i)]: the sizes of the headers of the layers above [i]
         that have no fields, summed when the stack is made *)
  mutable sized_above : fnode array array;
      (* [sized_above.(i)]: the layers above [i] whose header sizes depend
         on their fields *)
  mutable sent : int;
  mutable received : int;
  mutable delivered : int; (* messages the bypass delivered to the application *)
  mutable held : int; (* received messages a layer took in on the bypass ({!Layer.held}) *)
  releases : bool; (* the top layer's [up_after] is marked while it runs (casts) *)
  mutable releasing : bool; (* the top layer's [up_after] runs *)
  left_dn : int array;
      (* per layer: messages going down the bypass left to the layered path there *)
  left_up : int array; (* the same going up *)
}

type t = {
  view : View.t;
  nodes : node array; (* bottom first *)
  dues : Deadlines.t; (* when each node asked its timer to run, by node *)
  due_now : int array; (* the nodes whose timers run in this call of [timer] *)
  names : string list;
  all_fast : bool; (* every layer declared its common case: compressed casts are read *)
  all_send : bool; (* every layer declared the common case of a send: compressed sends are read *)
  cast : lane;
  send : lane;
  rframe : int array; (* a frame for the headers of layers with no fields (their constants) *)
  mutable released : int;
      (* casts the top layer passed to the application from its [up_after] on the bypass *)
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
  mutable refused : bool;
      (* A cast whose headers above one layer could not be read back into
         fields (an Order of Total, a control cast) cannot be read back at
         any layer below either: [refused] says so after a failed attempt,
         and [below_refused] holds while that cast goes down the layered
         path, so that the layers below do not try again. *)
  mutable below_refused : bool;
  fused_garbage : int ref;
}

(* The frame of the innermost message in the lane's bypass (a field kept
   up to date would cost a write barrier per cast). *)
let frame l = l.frames.(if l.depth = 0 then 0 else l.depth - 1)
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

let cast_node n = n.fast
let send_node n = n.sfast

(* [m] with the layered headers of the layers from [hi] down to [lo]
   pushed, from the fields in [frame]: the top one first, as the layered
   path pushes them. *)
let push_layered sel nodes frame ~hi ~lo m =
  let m = ref m in
  for j = hi downto lo do
    match sel nodes.(j) with Some f -> m := f.push frame f.off !m | None -> assert false
  done;
  !m

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
   Total, changes with every cast of the sequencer), except that the
   whole head last made is kept with every field above [from] it was made
   from ([last_key], [last]): another member's cast under Total has the
   same fields cast after cast, and a copy Mnak keeps then shares those
   bytes instead of a new string each (which it kept until stable, so
   the collector promoted it). *)
type cache = {
  mutable key : int array;
  mutable bytes : Bytes.t;
  from : int;
  upto : int;
  mutable valid : bool;
  mutable last_key : int array;
  mutable last : Bytes.t;
  mutable last_valid : bool;
}

let rec same_key c frame n k =
  k >= n || (frame.(c.from + k) = c.key.(k) && same_key c frame n (k + 1))

let refresh sel c nodes frame ~hi ~lo =
  let n = c.upto - c.from in
  let same = c.valid && same_key c frame n 0 in
  if not same then begin
    let e = push_layered sel nodes frame ~hi ~lo (Msg.empty ()) in
    c.bytes <- Bytes.unsafe_of_string (Msg.to_string e);
    Msg.release e;
    c.key <- Array.sub frame c.from n;
    c.valid <- true
  end

(* The headers of the layers from [lo] up, as bytes of the exact size (a
   copy a layer keeps holds no more than its headers until it is stable):
   those of [lo] to [hi] from the cache, then those of the layers above
   [hi] made from their fields. *)
let rec same_last c frame n k =
  k >= n || (frame.(c.from + k) = c.last_key.(k) && same_last c frame n (k + 1))

let head_bytes sel c nodes frame ~hi ~lo =
  refresh sel c nodes frame ~hi ~lo;
  let top = Array.length nodes - 1 in
  let n = Array.length frame - c.from in
  if hi >= top then c.bytes
  else if c.last_valid && Array.length c.last_key = n && same_last c frame n 0 then c.last
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
    if Array.length c.last_key <> n then c.last_key <- Array.make n 0;
    Array.blit frame c.from c.last_key 0 n;
    c.last <- b;
    c.last_valid <- true;
    b
  end

(* [m] with the headers of the layers from [lo] up in front. *)
let push_cached sel c nodes frame ~hi ~lo m =
  let b = head_bytes sel c nodes frame ~hi ~lo in
  if Bytes.length b = 0 then m else Msg.push_bytes b m

(* {1 The fused path}

   Down: from the top, each layer whose case holds does its part and the
   message goes on to the next; the first whose case does not hold gets
   it with the layered headers of the layers above pushed, and the rest
   is the layered path. Under the bottom, it leaves with the compressed
   header. What each layer does after the message went on runs as the
   calls return, bottom first, as in the layered path. Up is the same
   from the bottom, the layered headers of the rest pushed back from the
   fields where a case does not hold (a gap, a flush). Casts and sends
   take the same walks, each in its lane. *)

(* A frame for a message entering the bypass: the next one, or a fresh
   array when messages nest deeper than expected. *)
let enter l =
  let d = l.depth in
  if d = Array.length l.frames then
    l.frames <- Array.init (2 * d) (fun k -> if k < d then l.frames.(k) else Array.make l.nfields 0);
  l.depth <- d + 1;
  l.frames.(d)

let leave l =
  l.depth <- l.depth - 1;
  if l.depth = 0 then l.releasing <- false

(* Bytes of the layered headers of the layers above [i], from their fields:
   with the message's length (which the fused path does not change), the
   layered length at [i], counted only for a layer that needs it. *)
let above l frame i =
  let v = l.sized_above.(i) in
  let n = ref l.fixed_above.(i) in
  for k = 0 to Array.length v - 1 do
    let f = Array.unsafe_get v k in
    n := !n + f.size frame f.off
  done;
  !n

(* The order of the next walk: the short one if every layer it skips is
   live, its [live] read again only when some layered handler ran since
   it was last read. *)
let all_live lives =
  let rec go k =
    k = Array.length lives || ((match lives.(k) with Live (f, s) -> f s) && go (k + 1))
  in
  go 0

let order l =
  let g = !(l.gen) in
  if l.checked <> g then begin
    l.checked <- g;
    l.order <- (if all_live l.lives then l.short else l.plain)
  end;
  l.order

(* The first layer visited at or above [k] going up, for a message from
   [src]: a layer is skipped only for a message of the lane's kind from a
   member. *)
let next_up l o src k =
  match src with
  | Event.Cast_from _ when l.kind = 0 -> o.first_up.(k)
  | Event.Send_from _ when l.kind = 1 -> o.first_up.(k)
  | _ -> k

(* [mlen]: the message's length, where some layer needs the layered
   length. *)
let rec fused_dn (l : lane) frame i dst msg mlen =
  if i < 0 then begin
    l.sent <- l.sent + 1;
    l.net dst (Msg.push_fields tag l.kind frame msg)
  end
  else
    match l.cases.(i) with
    | Case { s; off; length; dn_ok; dn_part; dn_after_part; layered; local; dn_fast; dn_after; _ }
      ->
        let len = if length then mlen + above l frame i else -1 in
        if dn_ok s dst len then begin
          if dn_fast then dn_part s dst msg len ~layered frame off;
          fused_dn l frame l.order.next_dn.(i) dst msg mlen;
          if dn_after then dn_after_part s dst len ~up:local frame off
        end
        else dn_layered l frame i dst msg
    | No_case -> dn_layered l frame i dst msg

and dn_layered (l : lane) frame i dst msg =
  l.left_dn.(i) <- l.left_dn.(i) + 1;
  let msg = push_layered l.sel l.nodes frame ~hi:(Array.length l.nodes - 1) ~lo:(i + 1) msg in
  l.nodes.(i).dn dst msg

let rec fused_up (l : lane) frame i src msg mlen =
  if i = Array.length l.nodes then begin
    l.delivered <- l.delivered + 1;
    l.app.deliver src msg
  end
  else
    match l.cases.(i) with
    | Case { s; off; length; up_ok; up_part; up_after_part; layered; up_fast; up_after; _ } ->
        let len = if length then mlen + above l frame i else -1 in
        if up_ok s src len frame off then begin
          let src' = if up_fast then up_part s src msg len ~layered frame off else src in
          if src' == Layer.held then l.held <- l.held + 1
          else fused_up l frame (next_up l l.order src' (i + 1)) src' msg mlen;
          if up_after then
            if l.releases && i = Array.length l.nodes - 1 then begin
              (* What the top layer passes up from here was taken in on the
                 bypass or is released by what came by it. *)
              let prev = l.releasing in
              l.releasing <- true;
              up_after_part s src len frame off;
              l.releasing <- prev
            end
            else up_after_part s src len frame off
        end
        else up_layered l frame i src msg
    | No_case -> up_layered l frame i src msg

(* Fields from the network that no layered header can hold (a number too
   large for its codec) make the datagram garbage. *)
and up_layered (l : lane) frame i src msg =
  l.left_up.(i) <- l.left_up.(i) + 1;
  let m = ref msg in
  match
    for j = Array.length l.nodes - 1 downto i do
      match l.sel l.nodes.(j) with Some f -> m := f.push frame f.off !m | None -> assert false
    done
  with
  | () -> l.nodes.(i).up src !m
  | exception Invalid_argument e -> l.ferror (`Malformed e) !m

let mlen (l : lane) msg = if l.lengths.(Array.length l.nodes - 1) then Msg.length msg else 0

(* [local l j src m] delivers [m] to the layers from [j] up by the fused
   path, with the fields of the message under way: a layer's own cast,
   delivered locally. *)
let local (l : lane) j src msg =
  fused_up l (frame l) (next_up l (order l) src j) src msg (mlen l msg)

(* [walk_dn l dst msg]: a message from the application down the lane's
   bypass. *)
let walk_dn (l : lane) dst msg =
  let frame = enter l in
  match fused_dn l frame (order l).next_dn.(Array.length l.nodes) dst msg (mlen l msg) with
  | () -> leave l
  | exception e ->
      leave l;
      raise e

(* A compressed datagram's fields are read in place into the frame the
   bypass runs with; one that does not decode is garbage. *)
let walk_up (l : lane) msg =
  let frame = enter l in
  match Msg.pull_fields 2 frame msg with
  | exception Codec.Decode_error e ->
      leave l;
      l.ferror e msg
  | msg -> (
      l.received <- l.received + 1;
      match fused_up l frame (order l).first_up.(0) Event.Raw msg (mlen l msg) with
      | () -> leave l
      | exception e ->
          leave l;
          raise e)

(* {2 Re-entry}

   A cast a layer queued and now sends down (Mflow, as credit comes back)
   goes by the layered path from there in a stack without the fused path.
   In a fused stack, where the layer and those above it have no fields,
   the layered headers above it are the constants the fused path would
   make: they are taken off again, and the cast goes on below the layer
   by the fused path, with the compressed header. Receivers then take it
   by their fused path too. A send has no re-entry: one a layer queued
   (Pt2ptw's window) goes on layered. *)
let above_const t i =
  match t.above_const.(i) with
  | Some b -> b
  | None ->
      let e =
        push_layered cast_node t.nodes t.rframe
          ~hi:(Array.length t.nodes - 1)
          ~lo:(i + 1) (Msg.empty ())
      in
      let b = Bytes.unsafe_of_string (Msg.to_string e) in
      Msg.release e;
      t.above_const.(i) <- Some b;
      b

(* [run t f]: [f ()] in the frame just entered, which is then left. *)
let run t f =
  match f () with
  | () ->
      leave t.cast;
      true
  | exception e ->
      leave t.cast;
      raise e

(* As [run], without a closure per cast: every cast Mflow queued comes
   this way. *)
let go_below t frame i msg =
  t.reentered <- t.reentered + 1;
  let l = t.cast in
  match fused_dn l frame (order l).next_dn.(i) Event.Cast msg (mlen l msg) with
  | () ->
      leave l;
      true
  | exception e ->
      leave l;
      raise e

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
    match Msg.pull_bytes (above_const t i) msg with
    | None -> false
    | Some msg -> go (enter t.cast) msg
  else
    let frame = enter t.cast in
    let used = read_above t frame i msg in
    if used < 0 then begin
      leave t.cast;
      false
    end
    else go frame (Msg.pull_pushed used msg)

(* [reenter_dn t i below m]: the cast [m], which layer [i] sends down on
   its layered path with the layered headers of the layers above it in
   front, goes on by the fused path below [i] if it can, and then is true.
   [below] is [go_below t] at [i], made once per layer. *)
let reenter_dn t i below msg =
  t.cast.on && t.reentry.(i) && (not t.below_refused)
  && (take_above t i msg below
     ||
     (t.reentry_refused <- t.reentry_refused + 1;
      t.refused <- true;
      false))

(* Going up, a cast a layer held (Mnak, for a gap) and passes on later
   carries the layered headers of the layers above it, pushed back from
   the fields when it left the bypass: read back, they let it go on by
   the fused path above that layer. A cast received layered has them in
   its body, and goes on layered. *)
let go_above t frame i src msg =
  t.reentered_up <- t.reentered_up + 1;
  let l = t.cast in
  run t (fun () -> fused_up l frame (next_up l (order l) src (i + 1)) src msg (mlen l msg))

(* [reenter_up t i src m]: the same going up: a cast layer [i] passes up
   on its layered path (one it held for a gap) goes on by the fused path
   above [i] if it can. *)
let reenter_up t i src msg =
  if t.cast.releasing && i = Array.length t.nodes - 1 then t.released <- t.released + 1;
  t.cast.on && t.reentry_up.(i)
  && (match src with Event.Cast_from _ -> true | _ -> false)
  && take_above t i msg (fun frame msg -> go_above t frame i src msg)

let no_reenter_up _ _ = false
let no_reenter _ _ _ = false

(* {1 Instantiation} *)

let build (type s h) (ctx : Layer.ctx) t i ~reenter ~reenter_up
    (module L : Layer.S with type t = s and type header = h) ~(mk : s -> fnode option)
    ~(smk : s -> fnode option) =
  let nodes = t.nodes and dues = t.dues and gen = t.cast.gen in
  let net = t.cast.net and app = t.cast.app in
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
            else if t.refused then begin
              t.refused <- false;
              let prev = t.below_refused in
              t.below_refused <- true;
              match nodes.(i - 1).dn dst msg with
              | () -> t.below_refused <- prev
              | exception e ->
                  t.below_refused <- prev;
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

(* A layer's case [c] and its state [s], made node [i]'s part of the lane
   [l]'s fused path. *)
let fnode_of (type s h) (l : lane) i ~off ~split ~unpack ~(codec : h Codec.t) ~(state : s -> string)
    (c : (s, h) Layer.case) (s : s) =
  (* [layered] for a copy the layer keeps: the headers of the layers
     above it, from the frame the case runs with: those from the layer
     [sp] up made from their fields, the others cached. *)
  let sp, upto = split in
  let cache =
    {
      key = [||];
      bytes = Bytes.empty;
      from = off + c.nfields;
      upto;
      valid = false;
      last_key = [||];
      last = Bytes.empty;
      last_valid = false;
    }
  in
  let layered =
    {
      Layer.push = (fun m -> push_cached l.sel cache l.nodes (frame l) ~hi:(sp - 1) ~lo:(i + 1) m);
      head = (fun () -> head_bytes l.sel cache l.nodes (frame l) ~hi:(sp - 1) ~lo:(i + 1));
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
          local = (fun src m -> local l (i + 1) src m);
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

(* Where a lane's fields are, made from each layer's case of its kind
   ([shape]: its number of fields, whether it needs the layered length,
   whether it is framed): per layer, its offset in the frame (-1 where
   the lane is off) and [splits.(i)], the first layer above [i] whose
   case has fields and where they start; their number; per layer,
   whether one at or below it needs the layered length. *)
type layout = {
  offs : int array;
  total : int;
  needs_length : bool array;
  splits : (int * int) array;
}

let cast_shape l =
  match Layer.find_fast l with
  | Some (module F : Layer.FAST) -> Some (F.cast.nfields, F.cast.length, F.cast.framed)
  | None -> None

let send_shape l =
  match Layer.find_send l with
  | Some (module S : Layer.FAST_SEND) -> Some (S.send.nfields, S.send.length, S.send.framed)
  | None -> None

(* Every layer declared its case of this kind, and the lowest is framed. *)
let all_declare shape bottom_up =
  Array.for_all (fun l -> shape l <> None) bottom_up
  && match shape bottom_up.(0) with Some (_, _, framed) -> framed | None -> false

let layout shape bottom_up ~all =
  let n = Array.length bottom_up in
  let nf i = match shape bottom_up.(i) with Some (k, _, _) -> k | None -> 0 in
  let offs = Array.make n (-1) and total = ref 0 and needs_length = Array.make n false in
  if all then
    for i = 0 to n - 1 do
      offs.(i) <- !total;
      total := !total + nf i;
      match shape bottom_up.(i) with
      | Some (_, true, _) ->
          for j = i to n - 1 do
            needs_length.(j) <- true
          done
      | _ -> ()
    done;
  let split i =
    let s = ref (i + 1) in
    while !s < n && nf !s = 0 do
      incr s
    done;
    (!s, if !s < n then offs.(!s) else !total)
  in
  { offs; total = !total; needs_length; splits = Array.init n split }

let instantiate_fast (type s h) ctx t i ~cl ~sl layer
    (module F : Layer.FAST with type t = s and type header = h) (send : (s, h) Layer.case option) =
  let c = F.cast and off = cl.offs.(i) in
  let unpack =
    match Layer.find_compress layer with
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
    Some (fnode_of t.cast i ~off ~split:cl.splits.(i) ~unpack ~codec:F.codec ~state:F.state c s)
  in
  let smk =
    match send with
    | Some sc when sl.offs.(i) >= 0 ->
        fun s ->
          Some
            (fnode_of t.send i ~off:sl.offs.(i) ~split:sl.splits.(i) ~unpack:None ~codec:F.codec
               ~state:F.state sc s)
    | _ -> fun _ -> None
  in
  let reenter =
    if c.nfields = 0 && i > 0 then begin
      let k = c.expand [||] 0 in
      let below frame msg = go_below t frame i msg in
      fun dst h msg -> dst == Event.Cast && same_header h k && reenter_dn t i below msg
    end
    else no_reenter
  in
  let reenter_up src msg = reenter_up t i src msg in
  build ctx t i ~reenter ~reenter_up (module F) ~mk ~smk

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

let instantiate ctx t i ~cl ~sl layer =
  let fast m send = instantiate_fast ctx t i ~cl ~sl layer m send in
  match if cl.offs.(i) >= 0 then Layer.find_send layer else None with
  | Some (module S : Layer.FAST_SEND) ->
      fast (module S : Layer.FAST with type t = S.t and type header = S.header) (Some S.send)
  | None -> (
      match if cl.offs.(i) >= 0 then Layer.find_fast layer else None with
      | Some (module F : Layer.FAST) -> fast (module F) None
      | None ->
          let module L = (val layer : Layer.S) in
          build ctx t i ~reenter:no_reenter ~reenter_up:no_reenter_up
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

(* A lane before its nodes are made: [frames] frames to begin with. *)
let lane ~kind ~on ~sel ~nodes ~net ~app ~ferror ~gen ~releases ~frames (lo : layout) =
  let n = Array.length nodes in
  {
    kind;
    on;
    sel;
    nodes;
    net;
    app;
    ferror;
    gen;
    lives = [||];
    checked = -1;
    plain = no_order;
    short = no_order;
    order = no_order;
    cases = [||];
    nfields = lo.total;
    frames = Array.init frames (fun _ -> Array.make lo.total 0);
    depth = 0;
    lengths = lo.needs_length;
    fixed_above = [||];
    sized_above = [||];
    sent = 0;
    received = 0;
    delivered = 0;
    held = 0;
    releases;
    releasing = false;
    left_dn = Array.make n 0;
    left_up = Array.make n 0;
  }

(* The lane's parts read off its nodes once they are made. *)
let complete (l : lane) =
  let fixed, sized = above_sums l.sel l.nodes in
  l.fixed_above <- fixed;
  l.sized_above <- sized;
  l.cases <- Array.map (fun n -> match l.sel n with Some f -> f.case | None -> No_case) l.nodes;
  let lives, plain, short = orders l.sel l.nodes in
  l.lives <- lives;
  l.plain <- plain;
  l.short <- short;
  l.order <- plain

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

let create ?requires ?fused (ctx : Layer.ctx) layers ~net ~app =
  match check ?requires layers with
  | Error _ as e -> e
  | Ok () ->
      let bottom_up = Array.of_list (List.rev layers) in
      let n = Array.length bottom_up in
      let all_fast = all_declare cast_shape bottom_up in
      let all_send = all_fast && all_declare send_shape bottom_up in
      let fused =
        (match fused with Some b -> b | None -> Params.bool ctx.params fused_param) && all_fast
      in
      let cl = layout cast_shape bottom_up ~all:all_fast in
      let sl = layout send_shape bottom_up ~all:all_send in
      let reentry = Array.make n false and constant = Array.make n false in
      let reentry_up = Array.make n false in
      if all_fast then begin
        let none k = cl.offs.(k) = if k + 1 < n then cl.offs.(k + 1) else cl.total in
        let unpacks k = none k || Option.is_some (Layer.find_compress bottom_up.(k)) in
        let above = ref true in
        for i = n - 1 downto 0 do
          reentry.(i) <- none i && !above;
          reentry_up.(i) <- i < n - 1 && !above;
          constant.(i) <- none i && (i = n - 1 || constant.(i + 1));
          above := !above && unpacks i
        done
      end;
      let nodes = Array.make n dummy and gen = ref 0 and fused_garbage = ref 0 in
      let lane = lane ~nodes ~net ~app ~ferror:(fused_error fused_garbage) ~gen in
      let t =
        {
          view = ctx.view;
          nodes;
          dues = Deadlines.create n;
          due_now = Array.make n 0;
          names = List.map Layer.name layers;
          all_fast;
          all_send;
          cast = lane ~kind:0 ~on:fused ~sel:cast_node ~releases:true ~frames:4 cl;
          send = lane ~kind:1 ~on:(fused && all_send) ~sel:send_node ~releases:false ~frames:2 sl;
          rframe = Array.make cl.total 0;
          released = 0;
          reentry;
          constant;
          reentry_up;
          reentered_up = 0;
          above_const = Array.make n None;
          scratch = Cstruct.create 64;
          reentered = 0;
          reentry_refused = 0;
          refused = false;
          below_refused = false;
          fused_garbage;
        }
      in
      Array.iteri (fun i l -> nodes.(i) <- instantiate ctx t i ~cl ~sl l) bottom_up;
      complete t.cast;
      complete t.send;
      Ok t

let top t = t.nodes.(Array.length t.nodes - 1)
let cast t msg = if t.cast.on then walk_dn t.cast Event.Cast msg else (top t).dn Event.Cast msg

let send t rank msg =
  if t.send.on then walk_dn t.send (Event.Send rank) msg else (top t).dn (Event.Send rank) msg

let dn_ctl t e = (top t).dn_ctl e

let recv t msg =
  if t.all_fast && Msg.first_byte msg = tag then
    match Msg.byte_at msg 1 with
    | 0 -> walk_up t.cast msg
    | 1 when t.all_send -> walk_up t.send msg
    | -1 -> t.cast.ferror (`Truncated "fused") msg
    | _ -> t.cast.ferror (`Malformed "fused: unknown kind") msg
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

let fused t = t.cast.on

let states t =
  List.rev
    (Array.to_list
       (Array.map
          (fun n -> (n.lname, match n.fast with Some f -> f.state () | None -> ""))
          t.nodes))

let frames_in_use t = t.cast.depth + t.send.depth

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
  let c = t.cast and s = t.send in
  [
    ("sent", c.sent);
    ("received", c.received);
    ("garbage", !(t.fused_garbage));
    ("delivered", c.delivered);
    ("held", c.held);
    ("released", t.released);
    ("reentered", t.reentered);
    ("reentered_up", t.reentered_up);
    ("reentry_refused", t.reentry_refused);
    ("sends_on", Bool.to_int s.on);
    ("sends_sent", s.sent);
    ("sends_received", s.received);
    ("sends_delivered", s.delivered);
  ]
  @ left "down" c.left_dn @ left "up" c.left_up @ left "send down" s.left_dn
  @ left "send up" s.left_up

let expand t msg =
  if (not t.all_fast) || Msg.first_byte msg <> tag then Ok msg
  else
    let frame = Array.make t.cast.nfields 0 and sframe = Array.make t.send.nfields 0 in
    match Msg.pull (read_codec frame (if t.all_send then Some sframe else None)) msg with
    | Error e -> Error e
    | Ok (0, msg) ->
        Ok (push_layered cast_node t.nodes frame ~hi:(Array.length t.nodes - 1) ~lo:0 msg)
    | Ok (_, msg) ->
        Ok (push_layered send_node t.nodes sframe ~hi:(Array.length t.nodes - 1) ~lo:0 msg)
