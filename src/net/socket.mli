(** A socket-like API over a {!Tcp} instance: connect, listen and accept, read, write with
    back-pressure, shutdown, close.

    Nothing blocks: every operation that waits returns a {!Promise.t} that the stack resolves from
    its upcalls, as its clock and its lower layer drive it (a real loop, or a virtual clock in
    tests). Errors are {!Protocol.error}s. *)

(** Simple single-assignment promises. *)
module Promise : sig
  type 'a t

  val create : unit -> 'a t * ('a -> unit)
  (** [create ()] is an unresolved promise and the function that resolves it (only the first call
      counts). *)

  val return : 'a -> 'a t
  val peek : 'a t -> 'a option
  val is_resolved : 'a t -> bool

  val upon : 'a t -> ('a -> unit) -> unit
  (** [upon p f] calls [f] with [p]'s value once it is resolved (at once if it already is). *)
end

module Make (T : Tcp.S) : sig
  type t
  (** A connected (or connecting) socket. *)

  type listener

  val connect : T.t -> ?local_port:int -> T.host -> int -> (t, Protocol.error) result Promise.t
  (** [connect tcp host port] opens a connection; the promise resolves when the handshake completes
      or fails. *)

  val listen : T.t -> int -> (listener, Protocol.error) result
  (** [listen tcp port] accepts connections on [port]. *)

  val accept : listener -> (t, Protocol.error) result Promise.t
  (** [accept l] is the next established connection (in arrival order). *)

  val stop : listener -> unit
  (** [stop l] stops listening; established connections not yet accepted are aborted. *)

  val read : t -> Cstruct.t -> (int, Protocol.error) result Promise.t
  (** [read s buf] copies up to [Cstruct.length buf] received bytes into [buf] once some are there;
      [Ok 0] is the end of the stream. *)

  val read_available : t -> int
  (** Bytes received and not yet read. *)

  val write : t -> Cstruct.t -> (unit, Protocol.error) result Promise.t
  (** [write s buf] queues all of [buf]; the promise resolves when the last byte is in TCP's send
      buffer. [buf] must not change until then. Writes complete in order. *)

  val write_string : t -> string -> (unit, Protocol.error) result Promise.t

  val shutdown : t -> unit
  (** [shutdown s] sends a FIN once every queued write is in the send buffer; reading goes on. *)

  val close : t -> unit
  (** [close s] shuts down and stops reading: data still arriving is discarded. *)

  val abort : t -> unit
  (** [abort s] resets the connection at once. *)

  val closed : t -> (unit, Protocol.error) result Promise.t
  (** [closed s] resolves when the connection is over: [Ok ()] after a normal close in both
      directions, or the error that ended it. *)

  val connection : t -> T.connection
  val info : t -> Tcp.conn_info
end
