(** Process groups: join a group by name, and receive views, casts and point-to-point messages with
    virtual synchrony.

    A member starts alone, in a view of its own. Coordinators of views of the same group find each
    other (discovery messages to configured peer addresses and to every member seen before) and
    merge: the coordinator whose id is greater flushes its view and asks the other to take its
    members in; that one flushes too and installs a view of both. A join is such a merge; after a
    partition heals, the same mechanism merges the sides. Failures and leaves are handled inside a
    view by {!Gmp}.

    The application is blocked while a view change flushes: casts and sends made then are queued and
    go out in the next view, so each message is delivered in the view it was sent in. *)

type view_info = {
  vid : string;  (** ["LTIME:COORDINATOR"], the same at every member *)
  ltime : int;  (** increases at each view change *)
  members : string array;  (** member ids in rank order *)
  rank : int;  (** this member's rank *)
  coordinator : string;
  joined : string list;  (** members not in this member's previous view *)
  left : string list;  (** members of the previous view not in this one *)
  why : (string * string) list;
      (** for each member of [left], why: ["left"], or ["excluded: "] and the reason it was
          suspected here (["silent for 5.0 s"], ["did not answer flush 0.3 within 4.0 s"], ...) *)
}
(** A view as the application sees it. *)

val pp_view_info : view_info Fmt.t

(** Why a message was refused. A refused message is counted by no layer: it is as if it had not been
    given. *)
type error =
  | Flow_control
      (** flow control is full, or so is the queue of messages waiting for the next view
          ([group.queue]): the application hears [flow true]; it may go on after [flow false] *)
  | Too_big of { size : int; max : int }
      (** over the largest message this stack carries: [frag.max_message] with [Frag], one datagram
          less 512 bytes of headers without *)
  | Not_member of string  (** [send]: the destination is not in the view *)
  | Leaving  (** {!Make.leave} was called *)
  | Exited  (** this member has left the group, or was stopped *)
  | Not_primary of string
      (** [cast] with the [Primary] property: this member's view does not hold the quorum (the
          string says how many votes it has and needs). With any properties, also: this member
          learnt after a pause that its view went on without it (the string says which view), from
          then until it is in a view with others again, for two [group.merge_timeout] at most *)

val pp_error : error Fmt.t

(** Why a member cannot join. *)
type join_error =
  | Bad_address of { what : string; addr : string; reason : string }
      (** the member's, a peer's or the discovery group's address does not parse *)
  | Bad_stack of string  (** the layers do not fit (see {!Consort.Stack.check}) *)
  | Cannot_open of Consort.Transport.error  (** the member's address cannot be bound *)
  | Cannot_join_discovery of Consort.Transport.error

val pp_join_error : join_error Fmt.t

(** A member of another partition runs another stack: the two never merge. *)
type stack_error =
  | Incompatible of { peer : string; ours : string; theirs : string }
      (** [peer] (a member id) runs stack [theirs] where this member runs [ours], both as configured
          (no switch made either): members started with other properties or tunables *)
  | Unknown_stack of { peer : string; stack : string; reason : string }
      (** [peer]'s partition switched to a stack this program cannot build (a layer it does not
          know, or tunables that do not parse) *)

val pp_stack_error : stack_error Fmt.t
(** One line. *)

(** Why {!Make.switch} refuses. *)
type switch_error =
  | Not_a_stack of string
      (** the layers do not make a group's stack (see {!Consort.Stack.check}) *)
  | Changes_xfer
      (** state transfer cannot be added or removed by a switch. Adding it: the application gives
          its state's callbacks ([take_state], [install_state]) when it joins, and which members
          hold the state is known only to a group that ran Xfer from the start (a member that joined
          under the old stack delivered casts without it). Removing it: a member still waiting for
          its state would either drop what it holds or hand casts to an application without its
          state. Either breaks what Xfer promises, so the switch is refused; the application leaves
          and joins again on the other stack. *)
  | Not_running  (** this member has left the group *)

val pp_switch_error : switch_error Fmt.t

type transitional = {
  ending : string;  (** the regular view that ends *)
  next : string;
      (** the regular view to come; [""] when this member leaves the group (then [survivors] is
          itself) *)
  survivors : string array;  (** the members of [ending] also in [next], in [ending]'s rank order *)
}
(** A transitional view (extended virtual synchrony, property [Evs], as Transis, Totem and Spread
    state it): as a member goes from regular view [ending] to regular view [next], it first hears
    the members of [ending] that go on with it into [next] ([survivors], the intersection of the two
    views' agreed memberships, in [ending]'s rank order; this member included). Every member that
    installs [ending] then [next] hears the same transitional view.

    With safe delivery ([Agree]) a cast delivered before the transitional view (the regular part of
    [ending]) is delivered in [ending] by every member of [ending] that does not crash, in any
    partition. A cast delivered after it, and before [next] (the casts that the view change found
    not yet stable), is delivered by every member of [survivors] that does not crash, but may be
    missing at the members that departed: it is safe only with respect to the transitional view. *)

val pp_transitional : transitional Fmt.t

val client_magic : int
(** [0xC7]: the first byte of datagrams between clients and the servers of a client-server group
    ({!Cltsvr}). *)

(** Why {!Make.migrate} refuses. *)
type migrate_error =
  | Bad_new_address of { addr : string; reason : string }  (** the address does not parse *)
  | Cannot_move of Consort.Transport.error
      (** the address cannot be bound (in use, not local), or the discovery group cannot be joined
          there *)
  | Gone  (** this member has left the group *)

val pp_migrate_error : migrate_error Fmt.t
(** One line. *)

type callbacks = {
  view : view_info -> unit;  (** a view was installed; sending may resume *)
  cast : origin:string -> string -> unit;  (** a cast was delivered *)
  send : origin:string -> string -> unit;  (** a point-to-point message was delivered *)
  block : unit -> unit;  (** a view change started: messages sent now wait for the next view *)
  flow : bool -> unit;
      (** [flow true]: flow control asks the application to stop sending (a receiver is slow; what
          is sent now is queued in memory); [flow false]: it may send again *)
  exit : unit -> unit;  (** this member has left the group *)
}

module Side = Side
(** The side channel between views (discovery, merge, installation). *)

type rekey = {
  public : string;  (** this member's X25519 public key, for its member record *)
  draw :
    vid:string ->
    me:string ->
    context:string ->
    (string * string) list ->
    (string * string) list * (unit -> unit);
      (** [draw ~vid ~me ~context members]: a fresh key for view [vid] made by [me], wrapped for
          each of [members] (member id, public key) and bound to [context] ({!Side.context}); and
          the function that makes it the key this member's datagrams of the view are sealed and
          opened under (called as the view is installed) *)
  unwrap :
    vid:string ->
    me:string ->
    context:string ->
    installer:string * string ->
    string ->
    (unit -> unit) option;
      (** [unwrap ~vid ~me ~context ~installer:(id, public) wrapped]: the key [installer] wrapped
          for [me], if it opens *)
}
(** Per-view keys (property [Rekey]), as the transport below provides them
    ([Consort_seal.Seal.Make.rekey]): the runtime carries public keys in member records and wrapped
    view keys in Installs; the cryptography and the keys themselves stay in the transport. *)

(** Tunables. *)
module Param : sig
  val heal_interval : string
  (** ["group.heal_interval"], default 500 ms *)

  val merge_timeout : string
  (** ["group.merge_timeout"], default 2 s *)

  val install_retry : string
  (** ["group.install_retry"], default 100 ms *)

  val leave_timeout : string
  (** ["group.leave_timeout"], default 3 s *)

  val queue : string
  (** ["group.queue"], default 1 MiB: bytes (64 more per message) that the application may give
      while a view change flushes *)

  val migrate_drain : string
  (** ["group.migrate_drain"], default 10 s: how long a member that moved ({!Make.migrate}) keeps
      its old address open for members that have not acknowledged the move; it closes it as soon as
      all have *)

  val migrate_timeout : string
  (** ["group.migrate_timeout"], default 2 s: how long a member that moved waits for a first member
      to acknowledge the move; if none does (nothing reaches the new address), it goes back to the
      address it left *)
end

module Make (T : Consort.Transport.S) : sig
  type t

  val join :
    ?params:Consort.Params.t ->
    ?pool:Consort.Pool.t ->
    ?peers:string list ->
    ?seed:int ->
    ?on_sent:(vid:string -> [ `Cast | `Send of string ] -> string -> unit) ->
    ?on_lost:([ `Cast | `Send of string ] -> string -> string -> unit) ->
    ?on_bytes:([ `Cast | `Send ] -> origin:string -> Cstruct.t -> unit) ->
    ?discovery:string ->
    ?heal:bool ->
    ?take_state:(unit -> string) ->
    ?install_state:(string -> unit) ->
    ?durable_state:Xfer.durable ->
    ?on_stack_error:(stack_error -> unit) ->
    ?rekey:rekey ->
    ?transitional:(transitional -> unit) ->
    ?primary:(Primary.quorum -> unit) ->
    layers:Consort.Layer.t list ->
    T.t ->
    group:string ->
    addr:string ->
    callbacks ->
    (t, join_error) result
  (** [join ~layers tr ~group ~addr cb] opens [addr] on [tr] and joins [group]: the member installs
      a view of its own at once, then merges with the group's other members as it finds them through
      [peers] (addresses to send discovery messages to). [seed] determines the member's random
      choices, its incarnation number included; without it each join draws a fresh one, so a
      restarted member gets a new id. [layers] is the stack built at each view, top first (see
      {!Properties}). [on_sent] is called as each message enters the stack, with the view it is sent
      in (for logs and checkers); [on_lost kind payload reason] when a message the API accepted will
      not be delivered (a send made during a view change to a member that is not in the next view).
      [on_bytes], when given, takes the casts and sends delivered in place of the [cast] and [send]
      callbacks, as a view of the bytes received: valid only during the call (copy what must be
      kept), and nothing is copied between the socket and the call, except for a message reassembled
      from fragments (see {!copies}); with state transfer ([Xfer]) it is not used. [discovery] is an
      IP multicast group (["239.1.2.3:7500"]) that the member joins and to which coordinators also
      send their discovery messages, where the network has multicast. With [heal = false] (the
      [Heal] property absent) the member sends no discovery messages: it merges only when others
      find it.

      State transfer (with {!Xfer.layer} in [layers], the [Xfer] property): [take_state ()] is a
      snapshot of the application's state as it is now, a string that [install_state] on another
      member turns back into the same state; a member that joins the group (or whose partition
      merges into one whose state wins: the one that has delivered more casts) gets
      [install_state snapshot] before it is given any cast of its new view, and the casts and sends
      delivered meanwhile are handed over after it, in order. The snapshot streams in chunks
      ([xfer.chunk], [xfer.window]) from a member that holds the state; if that member fails,
      another one goes on in the next view. [take_state] must be deterministic: members with the
      same state give the same string. Both default to the empty state (nothing is transferred but
      the order of deliveries). With [durable_state] the state is one every member keeps (on disk):
      the most advanced by its age wins at each view, and what a member behind gets is made for its
      position ({!Xfer.durable}); [take_state] is not used.

      The stack's identity ({!Stack_id}: its layers and their tunables) travels in discovery, merge
      and view messages, and in Bottom's stamp: partitions on different stacks never merge.
      [on_stack_error] is called (and a warning logged), once per peer and stack, when this member
      hears of a partition on another stack as configured (both unswitched), or on a newer one it
      cannot build. A partition on an older stack (fewer switches) switches to a newer one it hears
      of, then merges; of two partitions that switched to different stacks while apart, the one
      whose stack has the lesser identity switches to the other's.

      With [rekey] (property [Rekey]) each view gets a fresh key: the member that makes the view
      draws it and wraps it in the Install for each member of the view, none other (not for the
      members excluded or leaving); a member installs a view only if the Install holds a key wrapped
      for it by the view's maker (the maker's public key as this member's view knows it, for a maker
      in it), bound to the Install's contents; a view of one gets a key of its own. A refused
      Install is counted ([group.no_view_key]) and logged with why. Members with and without [rekey]
      never merge: each reports the other as [Incompatible].

      With [transitional] (extended virtual synchrony, property [Evs]), each view change that takes
      this member from one view into the next is announced by [transitional] before the end of the
      old view's deliveries (see {!type:transitional}): it comes after [block] and the flush, then
      the old view's last deliveries (the safe casts not yet stable, with [Agree]), then [view]. A
      member's first view has none; a member that leaves the group (or stops) hears one with
      [next = ""] and itself alone, before its view's last deliveries and [exit].

      With the {!Primary} layer in [layers] (property [Primary]), every view is primary or not by
      the votes of its members ([primary.expected], [primary.votes] in [params]; [join] refuses them
      with [Bad_stack] if they make no quorum): [primary q] is called once in each view with the
      decision. A view without the quorum is told so right after [view]. A view with it becomes
      primary once every member is known to have installed it (each says so in the view, see
      {!Primary}): [primary q] comes then, casts made meanwhile wait (as during a view change) and
      go out once it is primary; if the view ends first, [primary] says it was not primary, before
      the next view. In a view that is not primary, [cast] is refused ([Not_primary]), and casts
      waiting from before are reported lost ([on_lost]); sends are not affected. *)

  val switch : ?params:Consort.Params.t -> t -> Consort.Layer.t list -> (unit, switch_error) result
  (** [switch t layers] changes the group's stack, at a view boundary: the coordinator flushes the
      current view (every message of it is delivered in it, with virtual synchrony) and installs the
      next view on [layers], with [params] over the member's tunables; messages given during the
      flush go out in the new view, on the new stack. Any member may ask; a member that is not the
      coordinator asks it. [Ok] says the switch was asked for: the [view] callback says when it is
      done ({!stack_name}, {!stack_id}). The layers must be known to every member (they are if they
      come from {!Properties.layers}, or were given to [join] or [switch] there). A view change
      under way (a crash, a merge) may come first: the switch is asked again until a view runs the
      new stack or another switch overtakes it. *)

  val migrate : t -> string -> (unit, migrate_error) result
  (** [migrate t addr] moves this member to address [addr] (another port, or another host's
      address): it keeps its member id ({!me}), its rank and its view; no view change is made, and
      the others' views do not show it leaving or joining. What the member sends goes out from
      [addr] at once. It tells each other member of its view (a {!Migrate} message from [addr],
      again every [group.install_retry] until that member acknowledges it), which then sends to
      [addr]; what was on its way to the old address is received there while the old address stays
      open (until every member has acknowledged, or [group.migrate_drain]), and the reliable layers
      send again to [addr] what was lost. A view change during the move is no matter: the member
      tells the members of the next view too, and answers a member that has not heard of the move
      from the address it knows. A member that never acknowledges is excluded as any silent member
      is. If no member acknowledges within [group.migrate_timeout] (nothing reaches [addr]), the
      member goes back to the address it left, as a new move told to everyone, and closes [addr]
      ({!address} says where it is; counter ["moves_back"]), rather than be cut out of the group. A
      member takes an acknowledgement only from the member it names, where it sends to that member,
      and only for its latest move.

      Who may move a member: with [Auth] (or [Privacy], [Rekey]) only a holder of the group's secret
      (or, with [Rekey], of the view's key) can make a move message that is accepted, and a captured
      one replayed is dropped by the transport; a receiver takes a move only from a member of its
      view, made in its view or the one before, sent from the address it names, and not older than a
      move of that member it already took ({!Migrate.judge}). Without [Auth] nothing is
      authenticated, moves no more than any other datagram.

      [Ok] says the member now listens at [addr] and has told the others. The member id keeps the
      address it joined at: it is a name, not where the member is ({!address}). *)

  val address : t -> string
  (** Where this member listens now: the address it joined at, or the latest it moved to. *)

  val member_address : t -> string -> string option
  (** [member_address t id]: where this member sends to member [id] of its view ([None] if [id] is
      not in the view). *)

  val set_client_handler : t -> (src:string -> string -> unit) -> unit
  (** [set_client_handler t f]: datagrams that start with {!client_magic} (clients of a
      client-server group, {!Cltsvr}) are given to [f] with the address they came from, instead of
      being dropped. *)

  val send_client : t -> dst:string -> string -> unit
  (** [send_client t ~dst s] sends datagram [s], which must start with {!client_magic} (else nothing
      is sent), to [dst] from this member's address. *)

  val set_status_handler : t -> (unit -> string) -> unit
  (** [set_status_handler t f]: what this member answers when another member of its view asks for
      its status ({!query_status}): [f ()], a JSON object of at most {!Side.max_status} bytes
      (beyond, an error object says so). Without a handler, the runtime answers with the view as it
      knows it ([group], [me], [view], [members], [rank], [blocked]). *)

  val query_status :
    ?timeout:Consort.Time.t ->
    t ->
    (((string * (string, string) result) list, string) result -> unit) ->
    unit
  (** [query_status t k] asks every member of this member's view for its status through the group
      (side messages to each member's address in the view, sealed as the group's traffic is), and
      calls [k] once: when all have answered, or after [timeout] (default 2 s), with one entry per
      member of the view in rank order, this one included: its status, or why there is none ("no
      answer within 2.0 s"). [Error] at once if this member is in no view, has left, or already has
      4 queries under way. A member answers only members of its current view, at the address the
      view gives them (never where the request came from), at most 64 answers a second. *)

  val unmoved : t -> string list
  (** Members of the view that have not yet acknowledged this member's latest move. *)

  val stack_id : t -> string
  (** The digest of the current stack's identity ({!Stack_id.digest}). *)

  val stack_name : t -> string
  (** The layers of the current view's stack, top first (["gmp:frag:...:bottom"]). *)

  val stack_epoch : t -> int
  (** How many switches made the current stack. *)

  val me : t -> string
  (** This member's id: its address and a random incarnation number. *)

  val primary : t -> Primary.quorum option
  (** With property [Primary]: whether the current view is primary (not yet, while its members are
      being heard from), and its votes; [None] without it. *)

  val view : t -> view_info

  val cast : t -> string -> (unit, error) result
  (** [cast t s] sends [s] to every member of the view, this one included. While a view change
      flushes, [s] waits in a bounded queue and goes out in the next view. [Error] says why [s] was
      refused; a refused message is never delivered anywhere, an accepted one is delivered with
      virtual synchrony. This member's own copy may be delivered from inside [cast], before it
      returns (in its turn in the total order with Total, when nothing ordered before it waits). *)

  val cast_bytes : t -> Bytes.t -> off:int -> len:int -> (unit, error) result
  (** [cast_bytes t b ~off ~len] is [cast t (Bytes.sub_string b off len)] without making that
      string: the bytes are copied once, before it returns, into the buffer that goes down the stack
      (or into the queue of a view change), so that [b] may be written again at once.
      @raise Invalid_argument if [off] and [len] do not name a range of [b]. *)

  val send : t -> string -> string -> (unit, error) result
  (** [send t id s] sends [s] to member [id] of the view, as {!val-cast} does. A message accepted
      while the view changes whose destination is not in the next view is dropped with a warning
      (counted by {!dropped_sends}). *)

  val max_message : t -> int
  (** The largest message {!val-cast} and {!val-send} accept. *)

  val refused : t -> int
  (** Messages refused so far. *)

  val dropped_sends : t -> int

  val leave : t -> unit
  (** [leave t] leaves the group cleanly: the others install a view without this member, which then
      gets [exit]. *)

  val suspect : t -> string list -> unit
  (** [suspect t ids] asks the group to treat these members as failed. *)

  val crash : t -> unit
  (** [crash t] stops at once, telling no one (for tests). *)

  val connection : t -> T.connection
  (** The transport connection the member runs on (for controls such as test drop filters). *)

  val copies : t -> int * int
  (** Deliveries whose bytes were copied between the stack and the application, and the bytes
      copied: every delivery to the [cast] and [send] callbacks (a string is made), and with
      [on_bytes] only the messages reassembled from fragments. *)

  val bundle_stats : t -> Bundle.stats
  (** What the member's connection bundled and unbundled ({!Bundle}). *)

  val is_blocked : t -> bool
  val has_exited : t -> bool
  val queued : t -> int
  val stack : t -> Consort.Stack.t option

  val needs_state : t -> bool
  (** [needs_state t]: with [Xfer], this member waits for the group's state (deliveries are held
      until it is installed). *)

  val delivery_view : t -> string
  (** Inside a [cast] or [send] callback, the id of the view the message was delivered in; it is the
      current view's, except for messages held while the state was transferred, handed over after a
      later view. *)

  val xfer_counters : t -> (string * int) list
  (** Counters of the state transfer (installs, chunks, restarts, ...). *)

  val garbage : t -> int
  (** Datagrams dropped by the side channel as malformed or of another group. *)

  val counters : t -> (string * (string * int) list) list
  (** The counters, by layer: first ["group"]'s since the member joined (views installed,
      side-channel datagrams dropped as malformed or of another group (["side_garbage"]), messages
      refused by {!val-cast} and {!val-send}, sends dropped at a view change, datagrams the
      transport failed to send, Installs refused for want of a view key that opens
      (["no_view_key"]), messages handed to a view's stack (["sent"]) and delivered to the
      application (["delivered"]), this member's moves (["moves"]), other members' moves refused
      (["move_refused"]) and migration messages malformed or of another group (["move_garbage"]));
      then each layer's in the current view's stack (each view has a stack of its own), except
      Bottom's, which count dropped datagrams by reason and are summed since the member joined
      (["garbage"]: no layer could decode it; ["wrong_group"]: another group or view; ["bad_rank"],
      ["from_self"]); then ["fused"], the current stack's fused path
      ({!Consort.Stack.fused_counters}, spaces made underscores, and ["on"]: 1 if its casts take the
      fused path). Empty after exit but for ["group"] and ["bottom"]. *)
end
