(** Shell commands and strings for the tests that run the kernel beside our stack (TAP devices,
    network namespaces, scripts run in them). *)

val read_file : string -> string
val write_file : string -> string -> unit

val replace : string -> string -> string -> string
(** [replace s a b] is [s] with every [a] replaced by [b] ([a] not empty). *)

val contains : string -> string -> bool
(** [contains s sub]: [sub] occurs in [s]. *)

val quiet : string -> int
(** [quiet cmd] runs [cmd] with its output thrown away: its exit code. *)

val run : string -> int * string
(** [run cmd]: its exit code and what it wrote (standard output and error). *)

val output : string -> string
(** [output cmd]: what [cmd] wrote; the test fails, with that text, if it exits non-zero. *)

val must : string -> unit
(** {!output}, the text thrown away. *)

val consort_exe : unit -> string
(** The [consort] binary built beside a test two directories below the root ([test/NAME]); the test
    fails if it is not built. *)
