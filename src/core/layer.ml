type ctx = { view : View.t; rng : Rng.t; params : Params.t; pool : Pool.t; now : unit -> Time.t }

type 'h out = {
  up : Event.src -> Msg.t -> unit;
  up_ctl : Event.up_ctl -> unit;
  dn : Event.dst -> 'h -> Msg.t -> unit;
  dn_ctl : Event.dn_ctl -> unit;
  alarm : Time.t -> unit;
}

module type S = sig
  type t
  type header

  val name : string
  val codec : header Codec.t
  val pp_header : header Fmt.t
  val provides : Contract.t list
  val requires : Contract.t list
  val create : ctx -> header out -> t
  val up : t -> Event.src -> header -> Msg.t -> unit
  val up_ctl : t -> Event.up_ctl -> unit
  val dn : t -> Event.dst -> Msg.t -> unit
  val dn_ctl : t -> Event.dn_ctl -> unit
  val timer : t -> Time.t -> unit
  val counters : t -> (string * int) list
end

type t = (module S)

let name (module L : S) = L.name
let provides (module L : S) = L.provides
let requires (module L : S) = L.requires

module Pass (N : sig
  val name : string
end) =
struct
  type t = unit out
  type header = unit

  let name = N.name
  let codec = Codec.unit
  let pp_header = Fmt.any "()"
  let provides = []
  let requires = []
  let create _ out = out
  let up out src () msg = out.up src msg
  let up_ctl out e = out.up_ctl e
  let dn out dst msg = out.dn dst () msg
  let dn_ctl out e = out.dn_ctl e
  let timer _ _ = ()
  let counters _ = []
end

(* The fused path. *)

type above = { push : Msg.t -> Msg.t; head : unit -> Bytes.t }

type ('t, 'h) case = {
  nfields : int;
  length : bool;
  framed : bool;
  size : int array -> int -> int;
  dn_ok : 't -> Event.dst -> int -> bool;
  dn_fast : 't -> Event.dst -> Msg.t -> int -> layered:above -> int array -> int -> unit;
  dn_after : 't -> Event.dst -> int -> up:(Event.src -> Msg.t -> unit) -> int array -> int -> unit;
  up_ok : 't -> Event.src -> int -> int array -> int -> bool;
  up_fast : 't -> Event.src -> Msg.t -> int -> layered:above -> int array -> int -> Event.src;
  up_after : 't -> Event.src -> int -> int array -> int -> unit;
  expand : int array -> int -> 'h;
  live : ('t -> bool) option;
  up_live : bool;
}

(* Allocated when the program starts: no other value is physically this one. *)
let held = Event.Send_from (Sys.opaque_identity (-1))
let nothing_dn_fast _ _ _ _ ~layered:_ _ _ = ()
let nothing_dn_after _ _ _ ~up:_ _ _ = ()
let nothing_up_fast _ src _ _ ~layered:_ _ _ = src
let nothing_up_after _ _ _ _ _ = ()

(* A case with no fields whose header is the constant [h]; [dn_ok] and
   [up_ok] say which events it takes. *)
let constant codec h ~live ~dn_ok ~up_ok ~up_fast =
  let n = Codec.size codec h in
  {
    nfields = 0;
    length = false;
    framed = false;
    size = (fun _ _ -> n);
    dn_ok;
    dn_fast = nothing_dn_fast;
    dn_after = nothing_dn_after;
    up_ok;
    up_fast;
    up_after = nothing_up_after;
    expand = (fun _ _ -> h);
    live = Some live;
    up_live = true;
  }

let constant_cast codec h ~live ?(up_fast = nothing_up_fast) () =
  constant codec h ~live ~up_fast
    ~dn_ok:(fun t dst _ -> live t && dst == Event.Cast)
    ~up_ok:(fun t src _ _ _ -> live t && match src with Event.Cast_from _ -> true | _ -> false)

let constant_send codec h ~live ?(up_fast = nothing_up_fast) () =
  constant codec h ~live ~up_fast
    ~dn_ok:(fun t dst _ -> live t && match dst with Event.Send _ -> true | Event.Cast -> false)
    ~up_ok:(fun t src _ _ _ -> live t && match src with Event.Send_from _ -> true | _ -> false)

module type FAST = sig
  include S

  val cast : (t, header) case
  val state : t -> string
end

let fast_layers : (t * (module FAST)) list ref = ref []

let fast (module F : FAST) : t =
  let l = (module F : S) in
  fast_layers := (l, (module F : FAST)) :: !fast_layers;
  l

let find_fast (l : t) = List.assq_opt l !fast_layers
let is_fast l = find_fast l <> None

module type COMPRESS = sig
  include FAST

  val compress : header -> int array -> int -> bool
end

let compress_layers : (t * (module COMPRESS)) list ref = ref []

let fast_compress (module C : COMPRESS) : t =
  let l = fast (module C : FAST) in
  compress_layers := (l, (module C : COMPRESS)) :: !compress_layers;
  l

let find_compress (l : t) = List.assq_opt l !compress_layers

module type FAST_SEND = sig
  include FAST

  val send : (t, header) case
end

let send_layers : (t * (module FAST_SEND)) list ref = ref []

let fast_send (module F : FAST_SEND) : t =
  let l = fast (module F : FAST) in
  send_layers := (l, (module F : FAST_SEND)) :: !send_layers;
  l

let find_send (l : t) = List.assq_opt l !send_layers

module type COMPRESS_SEND = sig
  include COMPRESS

  val send : (t, header) case
end

let fast_compress_send (module C : COMPRESS_SEND) : t =
  let l = fast_compress (module C : COMPRESS) in
  send_layers := (l, (module C : FAST_SEND)) :: !send_layers;
  l

module Pass_fast (N : sig
  val name : string
end) =
struct
  include Pass (N)

  let cast =
    {
      nfields = 0;
      length = false;
      framed = false;
      size = (fun _ _ -> 0);
      dn_ok = (fun _ _ _ -> true);
      dn_fast = nothing_dn_fast;
      dn_after = nothing_dn_after;
      up_ok = (fun _ _ _ _ _ -> true);
      up_fast = nothing_up_fast;
      up_after = nothing_up_after;
      expand = (fun _ _ -> ());
      live = None;
      up_live = false;
    }

  let send = cast
  let state _ = ""
end
