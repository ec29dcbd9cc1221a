(** What {!Group.Make.join} checks and builds before it opens the member's connection: its addresses
    parsed (the member's, the discovery group's, the peers'), the stack checked (it must agree on
    views; with [Primary], its tunables read), the largest message the stack carries, and the state
    transfer feature ([Xfer]) when the stack has it. No transport, no state of its own. *)

val header_reserve : int
(** Bytes kept for the headers of every layer when a message must fit in one datagram (a stack
    without [Frag]). *)

val has_layer : string -> Consort.Layer.t list -> bool
(** Whether the stack has the layer of this name. *)

val max_message_of : Consort.Params.t -> Consort.Layer.t list -> int -> int
(** The largest message of a stack with these tunables and layers over a datagram of [mtu] bytes:
    [Frag]'s bound, else the datagram less {!header_reserve}. *)

type timing
(** The membership's periods ([group.heal_interval], [group.install_retry]). *)

val timing : Consort.Params.t -> timing

val period : timing -> hurry:bool -> Consort.Time.t
(** When the periodic work runs next: at the lesser of the two periods, or within 10 ms when [hurry]
    (a merge waits for an answer, or a view for acknowledgements: what a join waits on). *)

val check :
  parse:(string -> ('a, string) result) ->
  params:Consort.Params.t ->
  layers:Consort.Layer.t list ->
  addr:string ->
  discovery:string option ->
  peers:string list ->
  ('a * 'a option * 'a list * Primary.config option, Group_types.join_error) result
(** The member's address, the discovery group's and the peers' (the first bad one is the error, with
    what it is), then the stack: [Bad_stack] if it does not agree on views or its [Primary] tunables
    are bad. *)

val xfer :
  ?durable:Xfer.durable ->
  params:Consort.Params.t ->
  layers:Consort.Layer.t list ->
  max_message:int ->
  me:string ->
  take:(unit -> string) ->
  install:(string -> unit) ->
  Group_types.callbacks ->
  Xfer.t option
(** The state transfer feature if the stack has [Xfer]: its deliveries go to the application's
    callbacks. *)

(** The member's connection. *)
module Open (T : Consort.Transport.S) : sig
  val conn :
    size:int ->
    pool:Consort.Pool.t ->
    T.t ->
    discovery:T.address option ->
    T.address ->
    (Bundle.Make(T).connection -> Bundle.Make(T).handler) ->
    ( Bundle.Make(T).connection,
      [ `Cannot_open of Consort.Transport.error | `Cannot_join of Consort.Transport.error ] )
    result
  (** A connection at this address (bundles of at most [size] bytes, from [pool]) that joined the
      discovery group if there is one; [`Cannot_open], or [`Cannot_join] (the connection closed
      again). *)
end
