(** Layer tunables with registered, printable defaults (Ensemble's
    [Param]).

    A layer registers each tunable once, at module initialisation, with a
    default and a sentence of documentation; a stack is given a [t] that
    overrides some of them. [consort params] lists every registered
    tunable. *)

type value = Int of int | Float of float | Bool of bool | Time of Time.t | String of string

type t
(** A set of overrides. *)

val empty : t
val set : string -> value -> t -> t

val override : t -> by:t -> t
(** [override t ~by] is [t] with every override of [by] on top. *)

val register : string -> value -> doc:string -> unit
(** [register name default ~doc] declares a tunable.
    @raise Invalid_argument if [name] is registered twice with different
    kinds of value. *)

val int : t -> string -> int
val float : t -> string -> float
val bool : t -> string -> bool
val time : t -> string -> Time.t
val string : t -> string -> string
(** [int t name] is the override of [name] in [t], or its default.
    @raise Invalid_argument if [name] is not registered or is of another
    kind (a programmer error). *)

val of_string : string -> (t, string) result
(** [of_string "pt2pt.rto=20ms,mnak.window=64"] parses overrides of
    registered tunables, checking names and kinds. *)

val registered : unit -> (string * value * string) list
val pp_value : value Fmt.t
