(** The membership kernel of the group runtime ({!Group.Make}), sans-IO: discovery of other
    partitions (discovery messages, probes, the table of members known outside the view), merging
    into another partition and taking one in (absorb), the announcement of a view this coordinator
    makes with its acknowledgements and retries, and the view of a leaving coordinator.

    It never calls the transport, a timer or the stack. The driver feeds it inputs (a side-channel
    message, the flush's end, the steps of the periodic work) with a {!Make.ctx}, the current view
    as the driver holds it, and executes the {!Make.action}s it returns in their order: send a side
    message, start a flush, name the coordinator merged into, ask for a suspicion, install a view,
    refuse casts in a view that went on without this member, exit. Each input is one step after
    which an action may change the view (a flush that starts, a view installed); the driver builds
    the next step's context afresh. *)

val max_probes : int
(** Probes out at most (16): the oldest is forgotten first. *)

val max_known : int
(** Members known outside the view at most (1024): learnt only from what answered a probe, an
    Install or a merge taken in, never from a stranger's discovery message. *)

module type ADDRESS = sig
  type t

  val equal : t -> t -> bool
  val to_string : t -> string
  val of_string : string -> (t, string) result
end

module Make (A : ADDRESS) : sig
  type ctx = {
    now : Consort.Time.t;
    me : Side.member;  (** this member (its address changes when it moves) *)
    view : Consort.View.t;  (** the current view *)
    addrs : A.t array;  (** its members' addresses, by rank *)
    pubs : string array;  (** its members' public keys (Rekey), by rank *)
    coord : int;  (** the rank of its coordinator: the least not suspected *)
    blocked : bool;  (** a flush of the view is under way *)
    resumed : bool;  (** this process ran again after a pause, within two merge timeouts *)
    gone : int -> bool;  (** the rank is suspected, or excluded or let go by the flush *)
    reported : (int * int list * int list * string) option;
        (** the flush round this member last reported to, as {!Side.accept_install} reads it *)
  }

  (** Why an Install naming this member was refused. *)
  type refusal =
    | View of string  (** {!Side.accept_install}'s sentence: it does not follow the flush *)
    | Stack of { stack : Side.stack; reason : string }  (** a stack this member cannot build *)
    | Key of string  (** with Rekey: no key for this member in it that opens *)

  type action =
    | Send of A.t * Side.t
    | Start_flush of string  (** flush the current view, for the reason given *)
    | Merge_into of string
        (** the next view may come from this member (the coordinator merged into; [""]: none) *)
    | Suspect of { ranks : int list; reason : string }
    | Install of {
        vid : string;
        ltime : int;
        members : Side.member list;
        stack : Side.stack option;  (** the stack it runs; [None]: the current one *)
        key : (unit -> unit) option;  (** the view's key (Rekey), to activate *)
      }
    | Dead_view of string
        (** the current view went on without this member: refuse casts, for this reason *)
    | Leave  (** ask the view's stack to let this member go (its coordinator's flush) *)
    | Exit  (** this leaving coordinator has nothing more to wait for, or a view let it go *)
    | Refused of { vid : string; src : A.t; why : refusal }
        (** an Install of view [vid] from [src] refused (counted in {!garbage}) *)

  type input =
    | Side of { src : A.t; msg : Side.t }
        (** a side message for this group and member: Gossip, Merge_req, Probe, Probe_ack, Install
            and Install_ack are handled, others ignored. An Install naming this member is
            acknowledged again if it is the current view, and, if it is a later view while this
            member's view is flushed, checked ({!Side.accept_install}, then [buildable], then
            [unwrap]) and either installed and acknowledged ([[Install; Send ack]]) or [Refused];
            one that lets a leaving member go is [Exit]. *)
    | Flushed of { survivors : int list; leavers : int list }
        (** this coordinator's flush is complete: the request to merge, or the next view *)
    | Alone  (** excluded, or everyone else gone: a view of one *)
    | Retry  (** periodic: the announced view resent to who has not acknowledged it, or given up *)
    | Merge_wait
        (** periodic: the merge request asked again, the coordinator asked probed, the wait
            extended, or given up for a fresh view of this partition *)
    | Heard  (** periodic: a merge heard of while busy, started *)
    | Gossip  (** periodic: this coordinator's discovery messages *)
    | Leave_wait
        (** periodic: a leaving member goes once its time is up, or, as the coordinator, once its
            flush is over and the view it named acknowledged or given up *)

  type t

  val create :
    group:string ->
    rng:Consort.Rng.t ->
    ?peers:A.t list ->
    ?discovery:A.t ->
    ?heal:bool ->
    merge_timeout:Consort.Time.t ->
    install_retry:Consort.Time.t ->
    leave_timeout:Consort.Time.t ->
    current_stack:(unit -> Side.stack) ->
    next_stack:(unit -> Side.stack) ->
    wrap:(vid:string -> members:Side.member list -> Side.t -> Side.t * (unit -> unit) option) ->
    buildable:(Side.stack -> (unit, string) result) ->
    unwrap:
      (view_members:string array ->
      pubs:string array ->
      Side.t ->
      ((unit -> unit) option, string) result) ->
    unit ->
    t
  (** [rng] draws the probes' nonces. [current_stack], [next_stack]: the stack the view runs and the
      one the next view this coordinator makes runs ({!Group_switch}); [wrap]: the Install of a view
      with its key ({!Group_rekey.wrap}); [buildable]: whether this member can build a stack an
      Install names ({!Group_switch.buildable}); [unwrap]: the key an Install brings this member,
      under the public keys of its view's members ({!Group_rekey.view_key}). *)

  val handle : t -> ctx -> input -> action list

  val leave : t -> now:Consort.Time.t -> alone:bool -> action list
  (** This member leaves the group ([alone]: in a view of one, or none): [[Exit]] alone, else
      [[Leave]]; nothing if it is leaving already. It goes anyway [leave_timeout] after. *)

  val leaving : t -> bool

  val installed : t -> unit
  (** A view is installed: no merge or absorb is under way any more. *)

  val learn : t -> me:string -> Side.member list -> unit
  (** The members of a view installed (but [me]) are known. *)

  val remember : t -> Side.member -> unit
  (** A member heard of outside the view, up to {!Membership.max_known}. *)

  val moved : t -> eid:string -> A.t -> unit
  (** Member [eid] moved to this address: known there, and a view waiting for its acknowledgement is
      resent there. *)

  val acked : t -> vid:string -> eid:string -> src:A.t -> unit
  (** Member [eid] acknowledges view [vid] from [src] (only from its address in the announcement
      counts). *)

  val mint : t -> int -> int
  (** A logical time for a view this member names, above the given one and every one it named. *)

  val expire_probes : t -> now:Consort.Time.t -> unit
  (** Probes out longer than a merge timeout are forgotten. *)

  val merging : t -> bool
  val absorbing : t -> bool

  val awaiting_acks : t -> bool
  (** A view this coordinator announced is not acknowledged by every member yet. *)

  val pending_targets : t -> string list
  (** Who has not acknowledged it. *)

  val changing : t -> bool
  (** A merge, an absorb or an announced view under way. *)

  val hurry : t -> blocked:bool -> bool
  (** The periodic work should come back soon: a merge waits for an answer, a view for
      acknowledgements, or a merge heard of waits to start. *)

  val garbage : t -> int
  (** Probe answers that matched no probe out, and Installs refused. *)

  val current : t -> A.t Group_view.t option
  (** The view installed last ({!set_current}); [None] before the first. *)

  val set_current : t -> A.t Group_view.t -> unit
  (** The driver installed this view (and bound its stack). *)

  val context :
    now:Consort.Time.t -> me:Side.member -> blocked:bool -> resumed:bool -> A.t Group_view.t -> ctx
  (** A step's context: view [v] (its coordinator the least rank not suspected, a rank gone if
      suspected or excluded or let go by the round this member reported to), with what the driver
      knows of its own state. *)

  val probes_out : t -> int
  val known : t -> int
  val known_member : t -> string -> Side.member option
end
