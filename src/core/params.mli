(** Layer tunables with registered, printable defaults (Ensemble's [Param]).

    A layer registers each tunable once, at module initialisation, with a default and a sentence of
    documentation; a stack is given a [t] that overrides some of them. [consort params] lists every
    registered tunable. *)

type value = Int of int | Float of float | Bool of bool | Time of Time.t | String of string

type t
(** A set of overrides. *)

val empty : t
val set : string -> value -> t -> t

val override : t -> by:t -> t
(** [override t ~by] is [t] with every override of [by] on top. *)

type range = { min : value; max : value }
(** The valid values of a numeric tunable, bounds included. *)

val register : ?min:value -> ?max:value -> string -> value -> doc:string -> unit
(** [register name default ~doc] declares a tunable. Numeric tunables have a range, checked by
    {!of_string}: [min] and [max] where given, otherwise 1 to 2{^ 40} for integers, 1 ns to one day
    for durations, 0 to 10{^ 12} for floats.
    @raise Invalid_argument
      if [name] is registered twice with different kinds of value, or a bound is of another kind. *)

val range : string -> range option
(** [range name] is the range of a registered numeric tunable. *)

val pp_range : range Fmt.t
(** [pp_range] prints ["[MIN, MAX]"]. *)

val int : t -> string -> int
val float : t -> string -> float
val bool : t -> string -> bool
val time : t -> string -> Time.t

val string : t -> string -> string
(** [int t name] is the override of [name] in [t], or its default.
    @raise Invalid_argument if [name] is not registered or is of another kind (a programmer error).
*)

(** Why overrides do not parse. *)
type error =
  | Not_an_assignment of string  (** an item that is not NAME=VALUE *)
  | Unknown of string  (** no tunable has this name *)
  | Bad_value of { name : string; value : string; expected : string }
      (** the value is not of the tunable's kind *)
  | Out_of_range of { name : string; value : value; range : range }

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line, naming the tunable, its value and what was expected. *)

val of_string : string -> (t, error) result
(** [of_string "pt2pt.rto=20ms,mnak.window=64"] parses overrides of registered tunables, checking
    names, kinds and ranges. *)

val registered : unit -> (string * value * string) list
val pp_value : value Fmt.t
