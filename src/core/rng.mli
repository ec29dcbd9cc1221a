(** Seeded pseudo-random generators.

    Layers and simulators never use the global [Random] state: each gets a generator derived from
    one seed, so a run is reproducible from its seed. *)

type t

val create : int -> t
(** [create seed] is a generator determined by [seed]. *)

val split : t -> t
(** [split t] is a new generator seeded from [t], advancing [t]. *)

val int : t -> int -> int
(** [int t n] is uniform in \[0, n). [n] must be positive. *)

val float : t -> float -> float
(** [float t x] is uniform in \[0, x). *)

val bool : t -> bool

val chance : t -> float -> bool
(** [chance t p] is [true] with probability [p]. *)

val bits64 : t -> int64
