(** The member's state in the group runtime ({!Group.Make}) and what the runtime does with it before
    and around any view: its connection and address (which change when it moves), the current view's
    stack, the membership kernel and each feature's state; sending on the side channel (from both
    addresses to a member that has not heard of a move) and the migration channel, stack errors
    reported once per peer and stack, the next view's stack adopted, moves told and undone.
    [Group.Make] includes it and adds installing views, the side channel's dispatch, the periodic
    work, joining and the application interface. *)

module Make (T : Consort.Transport.S) : sig
  module B : module type of struct
    include Bundle.Make (T)
  end

  module Ep : module type of struct
    include Consort.Endpoint.Make (B)
  end

  module Mv : module type of struct
    include Group_migration.Make (T)
  end

  module Oc : module type of struct
    include Group_join.Open (T)
  end

  module Addr : Membership.ADDRESS with type t = T.address

  module Mb : module type of struct
    include Membership.Make (Addr)
  end

  module V = Group_view

  type app = {
    cb : Group_types.callbacks;
    on_sent : (vid:string -> [ `Cast | `Send of string ] -> string -> unit) option;
    on_lost : [ `Cast | `Send of string ] -> string -> string -> unit;
    on_bytes : ([ `Cast | `Send ] -> origin:string -> Cstruct.t -> unit) option;
        (** deliveries as views of the received buffers, instead of strings *)
  }
  (** The application's callbacks. *)

  type t = {
    tr : T.t;
    mutable conn : B.connection Lazy.t;
    mutable me : Side.member;  (** its address changes when the member moves *)
    mv : Mv.t;  (** migration: this member's moves, and those of others ({!Group_migration}) *)
    mutable clients : (src:string -> string -> unit) option;
        (** client-server traffic ({!Cltsvr}) *)
    group : string;
    layers : Consort.Layer.t list;
    params : Consort.Params.t;
    pool : Consort.Pool.t;
    rng : Consort.Rng.t;
    app : app;  (** the application's callbacks *)
    discovery : T.address option;  (** a multicast group all members joined *)
    mb : Mb.t;
        (** the membership kernel: the current view, discovery, merge and absorb, the views this
            member announces ({!Membership}) *)
    mutable ep : Ep.Binding.t option;
        (** the current view's stack, bound to the member's connection *)
    mutable blocked : bool;
    queue : Group_queue.t;  (** the application's side: admission, queue, flow ({!Group_queue}) *)
    mutable max_message : int;
    pause : Group_pause.t;  (** pauses of this process, and a view that went on without it *)
    status : T.timer Group_status.t;  (** status answers counted, queries out *)
    mutable exited : bool;
    xfer : Xfer.t option;
    sw : Group_switch.t;  (** the stack and switching ({!Group_switch}) *)
    on_stack_error : Group_types.stack_error -> unit;
    evs : Group_evs.t;  (** extended virtual synchrony ({!Group_evs}) *)
    quorum : Group_primary.t;  (** with Primary: the current view's quorum ({!Group_primary}) *)
    mutable told : (string * string) list;  (** stack errors reported, by peer and stack *)
    mutable tick : T.timer option;
    rekey : Group_rekey.t;  (** per-view keys ({!Group_rekey}) *)
    timing : Group_join.timing;  (** the membership's periods, from the parameters *)
    counts : Group_counters.t;  (** what it counts, and the stacks of earlier views *)
  }

  val conn : t -> B.connection

  (** {2 The current view (a [Group_view.t], held by the kernel) and its stack} *)

  val cur : t -> T.address V.t option
  val current : t -> (T.address V.t * Ep.Binding.t) option
  val is_current : t -> T.address V.t -> bool
  val is_coordinator : t -> bool
  val me : t -> string
  val primary : t -> Primary.quorum option
  val now : t -> Consort.Time.t
  val is_blocked : t -> bool
  val has_exited : t -> bool
  val update_flow : t -> unit

  (** {2 Sending} *)

  val report : t -> (unit, Consort.Transport.error) result -> unit
  (** A send's outcome: an error other than [`Closed] counted and logged. *)

  val conn_for : t -> T.address -> B.connection
  (** The connection to answer [dst] from: the old one a member that has not yet heard of this
      member's move knows it at, while that is open; anyone else, the current one. *)

  val side_send : t -> T.address -> Side.t -> unit
  (** A side message, alone and at once; to a member that has not acknowledged this member's move,
      from both addresses. *)

  val migrate_send : t -> T.address -> Migrate.t -> unit
  val addr_of : t -> string -> T.address option

  (** {2 The stack} *)

  val stop_stack : t -> Ep.Binding.t -> unit
  (** Stops a view's stack, its Bottom counters kept ({!Group_counters.stack_stopped}). *)

  val stack_error : t -> Group_types.stack_error -> unit
  (** Logged and told to the application once per peer and stack (the last 64 or so). *)

  val adopt : t -> Side.stack -> (unit, string) result
  (** The next view runs [stack], built from the registry ({!Group_switch.adopt}); the largest
      message follows. *)

  (** {2 Moves} *)

  val send_moves : t -> unit
  (** Tells this member's latest move to the members of its view that have not heard of it. *)

  val close_old : t -> unit
  (** Closes the old connections no member needs (all kept while a view change is under way). *)

  val move_back : t -> B.connection -> unit
  (** Back to connection [oc]: no member acknowledged the latest move. *)

  val rebind : t -> B.connection -> T.address -> unit
  (** The view's stack on the member's connection [oc], at [local]; the members are told. *)

  (** {2 The membership kernel} *)

  val recently_resumed : t -> bool

  val ctx : t -> T.address V.t -> Mb.ctx
  (** The current view as the membership kernel sees it. *)
end
