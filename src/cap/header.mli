(** Amoeba's RPC header: the fixed fields that travel with every request and reply, beside the data
    buffer.

    In a request, [port] and [priv] together are the capability of the object the request is about
    ({!of_cap}, {!cap}); [command] says what to do; [offset], [size] and [extra] are the command's
    small arguments (such as a read's offset and length). In a reply, [status] says how it went, and
    the other fields are the command's small results. A request with no object (a server's [create],
    say) still names the server's port and may carry a null [priv]. *)

type priv = { obj : int; rights : Rights.t; check : string }
(** The private part of a capability. *)

type t = {
  port : Port.t;
  priv : priv;
  command : int;
  status : Status.t;
  offset : int;  (** non-negative *)
  size : int;  (** non-negative *)
  extra : int;  (** any integer *)
}

val null_priv : priv
(** Object 0, no rights, a zero check: no valid capability has it. *)

val request : ?offset:int -> ?size:int -> ?extra:int -> Cap.t -> int -> t
(** [request cap command] is a request header for [cap] (status [`Ok], numbers 0 unless given). *)

val reply : ?offset:int -> ?size:int -> ?extra:int -> ?priv:priv -> ?port:Port.t -> Status.t -> t
(** [reply status] is a reply header. [port] and [priv] let a reply carry a capability back (as
    std_restrict does); by default they are null. *)

val of_cap : Cap.t -> Port.t * priv

val cap : t -> (Cap.t, string) result
(** [cap h] is the capability named by [h.port] and [h.priv]. *)

val codec : t Consort.Codec.t
(** Total: a decoded header always satisfies the invariants above. *)

val equal : t -> t -> bool

val pp : t Fmt.t
(** [pp] never prints the check. *)
