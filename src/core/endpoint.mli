(** Binding a stack to a transport.

    [Make (T)] runs a [Stack.t] over any transport [T]: the view's member names are [T] addresses,
    ranks map to them, datagrams leaving the stack's lowest layer go out through [T.send] or
    [T.cast], arriving datagrams go up, and the stack's alarms become [T] timers. *)

(** Why a stack cannot be bound. *)
type error =
  | Bad_address of { member : string; reason : string }
      (** a member of the view is not an address of the transport *)
  | Bad_stack of string  (** the layers do not fit (see [Stack.check]) *)
  | Open of Transport.error  (** the connection cannot be opened (a port in use, ...) *)

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

module Make (T : Transport.S) : sig
  (** A stack bound to a connection that something else owns (the group runtime binds one stack per
      view to the member's one connection, and reads the datagrams itself). *)
  module Binding : sig
    type t

    val bind :
      ?requires:Contract.t list ->
      ?params:Params.t ->
      ?pool:Pool.t ->
      T.t ->
      T.connection ->
      view:View.t ->
      addrs:T.address array ->
      rng:Rng.t ->
      layers:Layer.t list ->
      app:Stack.app ->
      unit ->
      (t, error) result
    (** [bind tr conn ~view ~addrs ~rng ~layers ~app ()] builds the stack: rank [r] of [view] is at
        [addrs.(r)]. *)

    val recv : t -> Iovec.t -> unit
    (** A datagram for this stack, from the connection. *)

    val cast : t -> Msg.t -> unit
    val send : t -> int -> Msg.t -> unit
    val dn_ctl : t -> Event.dn_ctl -> unit

    val stop : t -> unit
    (** A [Event.Stop] goes down, timers end; the connection stays open. Further events are ignored.
    *)

    val is_stopped : t -> bool
    val stack : t -> Stack.t
    val addrs : t -> T.address array
    val send_errors : t -> int

    val set_addr : t -> int -> T.address -> unit
    (** [set_addr t r a]: rank [r] has moved to [a] (migration): what the stack sends to it, cast or
        send, goes to [a] from now on. The array {!addrs} is updated in place. *)

    val set_conn : t -> T.connection -> unit
    (** [set_conn t c]: this member moved to connection [c]: what the stack sends goes out through
        [c] from now on. *)
  end

  type t

  val create :
    ?requires:Contract.t list ->
    ?params:Params.t ->
    ?pool:Pool.t ->
    T.t ->
    view:View.t ->
    seed:int ->
    layers:Layer.t list ->
    app:Stack.app ->
    unit ->
    (t, error) result
  (** [create tr ~view ~seed ~layers ~app ()] opens a connection at the address named by
      [view.members.(view.rank)] and builds the stack. Errors (a bad address, a port in use, a stack
      whose layers do not fit) are returned, never raised. *)

  val cast : t -> Msg.t -> unit
  val send : t -> int -> Msg.t -> unit
  val dn_ctl : t -> Event.dn_ctl -> unit
  val stack : t -> Stack.t
  val connection : t -> T.connection

  val is_closed : t -> bool
  (** [true] after {!close}, or once the transport reported the connection gone (a simulated crash):
      the stack then stops, timers included. *)

  val close : t -> unit
  (** [close t] tears the stack down (a [Event.Stop] goes down) and closes the connection. Further
      calls are ignored. *)

  val send_errors : t -> int
  (** Datagrams the transport refused (counted, logged, not fatal). *)
end
