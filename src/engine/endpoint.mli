(** Binding a stack to a transport.

    [Make (T)] runs a {!Consort.Stack.t} over any transport [T]: the view's
    member names are [T] addresses, ranks map to them, datagrams leaving
    the stack's lowest layer go out through [T.send] or [T.cast], arriving
    datagrams go up, and the stack's alarms become [T] timers. *)

(** Why a stack cannot be bound. *)
type error =
  | Bad_address of { member : string; reason : string }
      (** a member of the view is not an address of the transport *)
  | Bad_stack of string  (** the layers do not fit (see {!Consort.Stack.check}) *)
  | Open of Consort.Transport.error  (** the connection cannot be opened (a port in use, ...) *)

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

module Make (T : Consort.Transport.S) : sig
  type t

  val create :
    ?requires:Consort.Contract.t list ->
    ?params:Consort.Params.t ->
    ?pool:Consort.Pool.t ->
    T.t ->
    view:Consort.View.t ->
    seed:int ->
    layers:Consort.Layer.t list ->
    app:Consort.Stack.app ->
    unit ->
    (t, error) result
  (** [create tr ~view ~seed ~layers ~app ()] opens a connection at the
      address named by [view.members.(view.rank)] and builds the stack.
      Errors (a bad address, a port in use, a stack whose layers do not
      fit) are returned, never raised. *)

  val cast : t -> Consort.Msg.t -> unit
  val send : t -> int -> Consort.Msg.t -> unit
  val dn_ctl : t -> Consort.Event.dn_ctl -> unit

  val stack : t -> Consort.Stack.t
  val connection : t -> T.connection

  val is_closed : t -> bool
  (** [true] after {!close}, or once the transport reported the connection
      gone (a simulated crash): the stack then stops, timers included. *)

  val close : t -> unit
  (** [close t] tears the stack down (a {!Consort.Event.Stop} goes down)
      and closes the connection. Further calls are ignored. *)

  val send_errors : t -> int
  (** Datagrams the transport refused (counted, logged, not fatal). *)
end
