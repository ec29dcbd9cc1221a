(* The member's state in the group runtime ({!Group.Make}): its connection and address, the view's
   stack, the features' states, and what the runtime does with them before any view is installed:
   send on the side channel and the migration channel, report stack errors, adopt a stack, tell and
   undo moves. *)

open Consort
open Group_types
module Log = Group_log.Log

module Make (T : Transport.S) = struct
  (* The stacks' datagrams go through one bundler. The side channel's go
     alone and at once: a transport underneath may seal them apart (the
     seal's per-view keys), and the protocols expect no order between
     them and the stacks' datagrams, which the network may reorder. *)
  module B = Bundle.Make (T)
  module Ep = Endpoint.Make (B)
  module Mv = Group_migration.Make (T)
  module Oc = Group_join.Open (T)

  module Addr = struct
    type t = T.address

    let equal = T.equal_address
    let to_string = T.address_to_string
    let of_string = T.address_of_string
  end

  module Mb = Membership.Make (Addr)
  module V = Group_view

  (* The application's callbacks. *)
  type app = {
    cb : callbacks;
    on_sent : (vid:string -> [ `Cast | `Send of string ] -> string -> unit) option;
    on_lost : [ `Cast | `Send of string ] -> string -> string -> unit;
    on_bytes : ([ `Cast | `Send ] -> origin:string -> Cstruct.t -> unit) option;
        (* deliveries as views of the received buffers, instead of strings *)
  }

  type t = {
    tr : T.t;
    mutable conn : B.connection Lazy.t;
    mutable me : Side.member; (* its address changes when the member moves *)
    mv : Mv.t; (* migration: this member's moves, and those of others ({!Group_migration}) *)
    mutable clients : (src:string -> string -> unit) option; (* client-server traffic ({!Cltsvr}) *)
    group : string;
    layers : Layer.t list;
    params : Params.t;
    pool : Pool.t;
    rng : Rng.t;
    app : app; (* the application's callbacks *)
    discovery : T.address option; (* a multicast group all members joined *)
    mb : Mb.t;
        (* the membership kernel: the current view, discovery, merge and absorb, the views this
           member announces ({!Membership}) *)
    mutable ep : Ep.Binding.t option;
        (* the current view's stack, bound to the member's connection *)
    mutable blocked : bool;
    queue : Group_queue.t; (* the application's side: admission, queue, flow ({!Group_queue}) *)
    mutable max_message : int;
    pause : Group_pause.t; (* pauses of this process, and a view that went on without it *)
    status : T.timer Group_status.t; (* status answers counted, queries out *)
    mutable exited : bool;
    xfer : Xfer.t option;
    sw : Group_switch.t; (* the stack and switching ({!Group_switch}) *)
    on_stack_error : stack_error -> unit;
    evs : Group_evs.t; (* extended virtual synchrony ({!Group_evs}) *)
    quorum : Group_primary.t; (* with Primary: the current view's quorum ({!Group_primary}) *)
    mutable told : (string * string) list; (* stack errors reported, by peer and stack *)
    mutable tick : T.timer option;
    rekey : Group_rekey.t; (* per-view keys ({!Group_rekey}) *)
    timing : Group_join.timing; (* the membership's periods, from the parameters *)
    counts : Group_counters.t; (* what it counts, and the stacks of earlier views *)
  }

  let conn t = Lazy.force t.conn

  (* The current view ({!Group_view}, held by the kernel) and its stack. *)
  let cur t = Mb.current t.mb
  let current t = match (Mb.current t.mb, t.ep) with Some c, Some ep -> Some (c, ep) | _ -> None
  let is_current t c = match Mb.current t.mb with Some c' -> c == c' | None -> false
  let me t = t.me.eid
  let primary t = Group_primary.quorum t.quorum
  let now t = T.now t.tr
  let is_blocked t = t.blocked
  let has_exited t = t.exited
  let update_flow t = Group_queue.update_flow t.queue ~exited:t.exited

  let report t = function
    | Ok () -> ()
    | Error `Closed -> ()
    | Error e ->
        t.counts.send_errors <- t.counts.send_errors + 1;
        Log.warn (fun m -> m "%s: send failed: %a" t.me.eid Transport.pp_error e)

  (* The connection to answer [dst] from: a member that has not yet heard
     of this member's move knows it at its old address (an Install it
     checks comes from there), while that is open; anyone else, the
     current one. *)
  let conn_for t dst =
    Mv.conn_for t.mv ~view:(Option.map (fun c -> (V.view c, V.addrs c)) (cur t)) ~conn:(conn t) dst

  (* To a member that has not acknowledged this member's move, from both
     addresses: it may know either (its acknowledgement may be on its way,
     or under a view key this member no longer holds). *)
  let side_send t dst v =
    let bytes = Codec.encode_string Side.codec v in
    let via c =
      let msg = Msg.create (Iovecs.of_string t.pool bytes) in
      report t (B.send_alone c ~dst msg);
      Msg.release msg
    in
    let c = conn_for t dst in
    if c != conn t then via c;
    via (conn t)

  let migrate_send t dst v =
    let msg = Msg.create (Iovecs.of_string t.pool (Codec.encode_string Migrate.codec v)) in
    report t (B.send_alone (conn t) ~dst msg);
    Msg.release msg

  let addr_of t s =
    match T.address_of_string s with
    | Ok a -> Some a
    | Error e ->
        Log.warn (fun m -> m "%s: bad member address %S: %s" t.me.eid s e);
        None

  (* {1 The current stack} *)

  let is_coordinator t = match cur t with Some c -> V.is_coordinator c | None -> false

  let stop_stack t ep =
    Group_counters.stack_stopped t.counts (Stack.counters (Ep.Binding.stack ep));
    Ep.Binding.stop ep

  let stack_error t e =
    let key =
      match e with
      | Incompatible { peer; theirs; _ } -> (peer, theirs)
      | Unknown_stack { peer; stack; _ } -> (peer, stack)
    in
    if not (List.mem key t.told) then begin
      t.told <- key :: (if List.length t.told > 64 then [] else t.told);
      Log.warn (fun m -> m "%s: %a" t.me.eid pp_stack_error e);
      t.on_stack_error e
    end

  (* The next view runs [stack]: build it from the registry. *)
  let adopt t (stack : Side.stack) =
    match Group_switch.adopt t.sw stack with
    | Ok true ->
        t.max_message <-
          Group_join.max_message_of t.params (Group_switch.layers t.sw)
            (B.query (Lazy.force t.conn)).B.mtu;
        Ok ()
    | Ok false -> Ok ()
    | Error e -> Error e

  (* {1 Moves} *)

  let send_moves t =
    match cur t with
    | Some c ->
        Mv.send_moves t.mv ~now:(now t)
          ~view:(V.view c, V.addrs c)
          ~addr:t.me.addr ~send:(migrate_send t)
    | None -> ()

  (* While a view change is under way, members of other partitions may
     know this member at an old address (a merge request it sent from
     there). *)
  let close_old t = Mv.close_old t.mv ~now:(now t) ~changing:(t.blocked || Mb.changing t.mb)

  (* Back to connection [oc]: no member acknowledged the latest move. *)
  let rec move_back t oc =
    Mv.go_back t.mv ~bad:(conn t)
      ~switch:(fun oc local ->
        t.conn <- Lazy.from_val oc;
        t.me <- { t.me with addr = T.address_to_string local })
      ~members:(Option.map V.members (cur t))
      oc;
    rebind t oc (B.query oc).B.local

  (* The view's stack on the member's connection [oc], at [local]: the members are told. *)
  and rebind t oc local =
    match current t with
    | Some (c, ep) ->
        Ep.Binding.set_conn ep oc;
        Ep.Binding.set_addr ep (V.rank c) local;
        send_moves t
    | None -> ()

  let recently_resumed t = Group_pause.recently_resumed t.pause ~now:(now t)

  (* The current view as the membership kernel sees it. *)
  let ctx t c = Mb.context ~now:(now t) ~me:t.me ~blocked:t.blocked ~resumed:(recently_resumed t) c
end
