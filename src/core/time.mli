(** Time in nanoseconds, as a plain integer.

    The same type serves the real engine (monotonic clock) and the simulator (virtual time starting
    at zero). 63-bit integers hold 292 years of nanoseconds. *)

type t = int

val zero : t
val of_ns : int -> t
val of_us : int -> t
val of_ms : int -> t
val of_sec : float -> t
val to_us : t -> float
val to_ms : t -> float
val to_sec : t -> float
val add : t -> t -> t
val diff : t -> t -> t

val pp : t Fmt.t
(** [pp] prints a duration or a date with a fitting unit ([12.3ms]). *)
