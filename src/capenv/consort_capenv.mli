(** A program's capability environment, as a Consort process server gives it (VAMNET's capability
    environment in the process descriptor).

    A program started by [consort cap exec] (or a boot server) finds its standard streams already
    connected to the capabilities of its descriptor (ordinary [stdin], [stdout], [stderr]), and
    every named capability through this module. No dependency: the capabilities are handed out in
    their text form ([cap1:...]), which [Consort_cap.Cap.of_string] reads.

    The process server passes them in the environment: [CONSORT_CAPS] (the names, comma-separated),
    [CONSORT_CAP_<NAME>] for each (the name in capitals, [.] and [-] as [_]), [CONSORT_PROCESS] (the
    process's own capability, with read rights: status and wait), and [CONSORT_LOCATE] (where the
    environment's ports were located). *)

val names : unit -> string list
(** The names of the capability environment, in the descriptor's order ([stdin], [stdout], [stderr],
    [root], then the others given). *)

val find : string -> string option
(** [find name] is the capability named [name], as [cap1:...] text. *)

val root : unit -> string option
(** [find "root"]: the root directory. *)

val self : unit -> string option
(** The process's own capability. *)

val locate : unit -> string option
(** Where to locate the environment's ports ([ADDR:PORT,...]). *)

val var : string -> string
(** [var name] is the environment variable that holds [name]'s capability. *)
