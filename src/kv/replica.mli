(** A replica of the key-value store: a state machine replicated over a
    process group with virtual synchrony.

    {b Ordering.} In each view, one member is the sequencer: it puts the
    requests every member forwards to it in batches and casts them; as
    casts from one member are delivered in FIFO order with virtual
    synchrony, every member applies the same writes in the same order.
    Reads are ordered the same way (ordered reads, not leases): a read is
    answered from the state reached at its place in the order, once that
    place is committed. This needs no clock assumption, which a lease
    would (a lease holder must trust a bound on clock drift and on pauses
    of its own process; a pause longer than the bound gives stale reads).

    {b Commit.} A member applies a batch, writes it to its log and fsyncs,
    then casts an acknowledgement. A request is answered when every member
    of the view has acknowledged its batch: by then the write is on the
    disk of every member of a majority, so it survives the crash of any
    of them and a restart of all.

    {b Primary views.} Only a view holding a majority of the configured
    replicas serves requests; a member in a minority view refuses new
    requests ([no quorum]) and answers those in flight as unknown.

    {b State transfer.} At the start of each primary view every member
    casts its epoch (the last primary view it started) and sequence
    number; the most advanced one becomes the sequencer and casts the
    state the others start from: the writes they miss, from its memory,
    when their log is a prefix of its own, otherwise a full snapshot.
    Then every member starts a new epoch. A replica that restarts thus
    catches up by state transfer when it joins. *)

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

module Make (T : Consort.Transport.S) : sig
  type t

  val create :
    ?params:Consort.Params.t ->
    ?seed:int ->
    ?layers:Consort.Layer.t list ->
    T.t ->
    config ->
    Store.t ->
    (t, string) result
  (** [create tr cfg store] joins the group (with the [vsync] stack unless
      [layers]) and starts serving once in a primary view. *)

  val submit : t -> Wire.request -> (Wire.outcome -> unit) -> unit
  (** [submit t r k] carries out [r]; [k] is called once with the outcome. *)

  val phase : t -> phase
  val me : t -> string
  val view : t -> Consort_group.Group.view_info
  val is_sequencer : t -> bool
  val store : t -> Store.t
  val in_flight : t -> int

  val crash : t -> unit
  (** Stops at once, telling no one; requests in flight get no answer. *)

  val halt : t -> unit
  (** Stops the application at once (no cast, no answer, no disk step), as
      a process that has just died; the group member goes on until
      {!crash}. For tests that kill a replica in the middle of a step. *)

  val leave : t -> unit
  (** Answers the requests in flight as unknown, and leaves the group. *)
end
