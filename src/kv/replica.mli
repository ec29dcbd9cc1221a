(** A replica of the key-value store: a state machine replicated over a process group with virtual
    synchrony, total order ([Total]) and state transfer ([Xfer]): the stack [vsync,Total,Xfer].

    {b Ordering.} Each member casts the requests its clients make, in batches; the group's total
    order ([total.protocol]: the sequencer by default, or the token) gives every member the same
    sequence, which it applies. Reads are ordered too (ordered reads, not leases), in batches: a
    member casts a read marker ({!Wire.msg_.Read}, one on its way at a time; every read that comes
    while it is on its way joins it) and answers those reads from the state reached at the marker's
    place in the order, once that place is committed. This needs no clock assumption, which a lease
    would (a lease holder must trust a bound on clock drift and on pauses of its own process; a
    pause longer than the bound gives stale reads).

    {b Commit.} A member applies an order, writes it to its log and fsyncs, then sends an
    acknowledgement to every other member (point-to-point: it needs no order): the number of orders
    of the view it holds and their digest, chained order by order, which a member counts only if its
    own chain after as many orders is the same. A request is answered when every member of the view
    has acknowledged its order: by then the write is on the disk of every member of a majority, so
    it survives the crash of any of them and a restart of all. Group commit: one fsync runs at a
    time (apart from the loop, see [create]'s [fsync]); it acknowledges only the orders written
    before it started, and the orders applied while it ran share the next one.

    {b Storage faults.} A write, fsync or rename the disk refuses (full, EIO, EDQUOT) stops the
    replica: nothing it failed to store is ever acknowledged (see [create]).

    {b Primary views.} Only a view holding a majority of the configured replicas serves requests; a
    member in a minority view refuses new requests ([no quorum]) and answers those in flight as
    unknown.

    {b State transfer.} At each view the group's [Xfer] layer, with a durable state
    ({!Consort_group.Xfer.durable}), compares every member's age (its epoch, then its write number):
    the most advanced member gives each member behind the writes it misses when that member's log is
    a prefix of its own and the writes are still in its memory, a full snapshot otherwise, streamed
    in chunks; the member behind holds its deliveries until it has installed it. A replica that
    restarts thus catches up by state transfer when it joins, from its own log and a suffix when it
    can.

    {b Epochs.} Once Xfer's decision is made (every member's position is known, the same
    everywhere), every member of a primary view computes the view's epoch (greater than the view's
    logical time and than every member's epoch and promise), promises it durably and casts [Begin];
    the epoch starts at each member once every member's [Begin] is delivered, and only then are
    requests cast. So any later primary view, which shares a member with this one, starts a greater
    epoch: two views never start the same epoch, and the most advanced state (greatest epoch, then
    write number) holds every answered write. Epochs alone do not tell whether one log is a prefix
    of another (members that end a view apart each apply their part of it, then what had no place in
    the order): a chained digest of the writes does. *)

val src : Logs.src

type config = {
  group : string;
  addr : string;  (** this replica's group address *)
  peers : string list;  (** the other replicas' group addresses *)
  request_timeout : Consort.Time.t;  (** an unanswered request is answered unknown after this *)
  max_batch : int;  (** requests per cast *)
}

val default_config : group:string -> addr:string -> peers:string list -> config
(** A request timeout of 10 s, 500 requests per batch. *)

type phase = Minority | Syncing | Active

val pp_phase : phase Fmt.t

(** What a replica tells an observer ([create ~observe]), for simulations that check the
    acknowledgements against what each member applied. *)
type observation =
  | Applied of { member : string; vid : string; count : int; chain : string }
      (** [member] applied the [count]th order of view [vid]; [chain]: the view's orders so far,
          chained order by order (what its acknowledgement of [count] orders names) *)
  | Counted of { member : string; vid : string; origin : string; count : int }
      (** [member] counted [origin]'s acknowledgement of the first [count] orders of view [vid]
          toward their commit *)

type fsync_runner = fd:Unix.file_descr -> (unit -> unit) -> ((unit, exn) result -> unit) -> unit
(** How a replica runs the fsync that makes applied orders durable: [runner ~fd run k] calls [run]
    (the fsync through the store's [Io]) or fsync(2) on [fd], here or in another thread or later,
    then [k] with its outcome on the replica's loop (never from another thread). The replica
    acknowledges the orders it covers only after [k (Ok ())]. *)

val inline_fsync : fsync_runner
(** [run ()] at once, then [k]: the fsync blocks the loop. *)

(** The replica of any state machine ({!Rsm.MACHINE}) with its store ([Store.Make (M)]): the
    directory server's replicas are [Generic (Dir_machine) (Store.Make (Dir_machine)) (T)]. *)
module Generic
    (M : Rsm.MACHINE)
    (Store :
      Store.S
        with type op = M.op
         and type response = M.response
         and type limits = M.limits
         and type machine = M.t)
    (T : Consort.Transport.S) : sig
  type t

  val create :
    ?params:Consort.Params.t ->
    ?seed:int ->
    ?layers:Consort.Layer.t list ->
    ?on_failure:(Store_intf.failure -> unit) ->
    ?observe:(observation -> unit) ->
    ?fsync:fsync_runner ->
    T.t ->
    config ->
    Store.t ->
    (t, string) result
  (** [create tr cfg store] joins the group (with the [vsync,Total,Xfer] stack unless [layers];
      [params] may choose [total.protocol]) and starts serving once in a primary view.

      When the disk refuses a step (every path to the store's sync is watched: after applying
      orders, at a view, when giving or installing a state, at a promise and at the start of an
      epoch), the replica fails: it acknowledges nothing more, answers the requests in flight (those
      never cast are refused with [disk full] or [io-error: ...], the others unknown), refuses every
      later one the same way, logs one line, leaves the group and calls [on_failure] (the process
      should then exit).

      [observe] (default: nothing) hears each order applied and each acknowledgement counted.

      [fsync] (default {!inline_fsync}) runs the fsync of the log after orders are applied (group
      commit: one at a time; the orders applied while it runs wait for the next), in a view of
      several members; a member alone in its view runs it with {!inline_fsync} (nothing to overlap
      it with: the hand-off would only add latency). *)

  val failure : t -> Store_intf.failure option
  (** The I/O error that stopped this replica, if any. *)

  val submit : t -> M.op Wire.request_ -> (M.response Wire.outcome_ -> unit) -> unit
  (** [submit t r k] carries out [r]; [k] is called once with the outcome. *)

  val pending_ack : t -> origin:string -> int option
  (** [pending_ack t ~origin]: the count of [origin]'s acknowledgement that names more orders of the
      view than this member has applied, and waits for them here (then counts only if this member's
      orders are the ones it names). *)

  val deliver_send : t -> origin:string -> string -> unit
  (** [deliver_send t ~origin m]: [m] as if the group delivered it point-to-point from member
      [origin] (for tests that forge an acknowledgement). *)

  val phase : t -> phase
  val me : t -> string
  val view : t -> Consort_group.Group.view_info

  val is_sequencer : t -> bool
  (** Active and the view's first member: the one that orders with Total's sequencer. *)

  val transfers : t -> int * int
  (** States this replica installed: as a suffix of its log, as a whole snapshot. *)

  val store : t -> Store.t
  val in_flight : t -> int

  val crash : t -> unit
  (** Stops at once, telling no one; requests in flight get no answer. *)

  val halt : t -> unit
  (** Stops the application at once (no cast, no answer, no disk step), as a process that has just
      died; the group member goes on until {!crash}. For tests that kill a replica in the middle of
      a step. *)

  val leave : t -> unit
  (** Answers the requests in flight as unknown, and leaves the group. *)
end

(** The key-value store's replica. *)
module Make (T : Consort.Transport.S) : module type of Generic (Machine.Rsm) (Store) (T)
