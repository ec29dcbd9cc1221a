(** The [consort] executable run as real processes by the capability services' tests (run from a
    test directory two levels below the root of the built tree). *)

val consort : unit -> string
(** The path of the built [consort] executable. *)

val base_env : string list
(** What every process started here has in its environment beside the test's own:
    [CONSORT_MULTICAST=off], so that tests running at once never find each other's servers. *)

val spawn :
  ?env:string list -> ?stdin_fd:Unix.file_descr -> out:string -> err:string -> string list -> int
(** [spawn ~out ~err args] starts [consort args] with its standard output and error written to the
    files [out] and [err] (truncated), its standard input [stdin_fd] (left open) or [/dev/null], and
    [env] added to {!base_env}; its pid. *)

val code_of : Unix.process_status -> int
(** The exit code, or 1000 plus the signal's number for a process killed by a signal. *)

val wait_code : int -> int
(** [wait_code pid] is the exit status ({!code_of}) of [pid], waiting at most 60 s; then the process
    is killed and the test fails: a bug that hangs fails instead of hanging the suite. *)

val eventually : ?n:int -> string -> (unit -> bool) -> unit
(** [eventually what f] polls [f] every 50 ms until it holds, at most [n] times (600: 30 s); then
    the test fails, saying [what]. *)

val fs_init : string -> unit
(** [fs_init data] prepares a file server's data directory (empty or missing) with
    [consort cap fs init], as a boot declaration's file server needs before its first start; fails
    the test if it does not exit 0. *)
