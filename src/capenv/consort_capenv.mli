(** A program's capability environment, as a Consort process server gives it (VAMNET's capability
    environment in the process descriptor).

    A program started by [consort cap exec] (or a boot server) finds its standard streams already
    connected to the capabilities of its descriptor (ordinary [stdin], [stdout], [stderr]), and
    every named capability through this module (it needs only [unix]). The capabilities are handed
    out in their text form ([cap1:...]), which [Consort_cap.Cap.of_string] reads.

    The process server passes no capability in the environment (any process of the same user could
    read it in [/proc/PID/environ]): [CONSORT_CAPS] holds the names (comma-separated), and the
    capabilities are read once, at the first {!find} or {!self}, from the descriptor named by
    [CONSORT_CAPS_FD] (3: a pipe of ["NAME CAP"] lines, the process's own capability under
    {!self_name}), which is then closed. Without [CONSORT_CAPS_FD] (the boot server's children),
    [CONSORT_CAP_<NAME>] holds each (the name in capitals, [.] and [-] as [_]), and
    [CONSORT_PROCESS] the process's own. [CONSORT_LOCATE] says where the environment's ports were
    located. *)

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

val self_name : string
(** ["@self"]: the name of the process's own capability on the descriptor. *)
