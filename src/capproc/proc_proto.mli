(** The process server's requests.

    - [ps_exec] on the server's capability (object 0, {!Consort_cap.Rights.create}): data = a {!Pd}
      descriptor; the reply comes once the program was fetched, checked and started, and carries the
      process's owner capability in its header; or a refusal with a one-line reason as data.
    - [ps_wait] on a process ({!Consort_cap.Rights.read}): answered when the process has ended and
      its output was passed on: [offset] = {!kind}, [extra] = the exit code or signal number, data =
      a one-line account ("exited with code 3", "stopped: cpu time limit (2000 ms) exceeded"). After
      [hold] with the process still running, [STD_NOTNOW]: ask again.
    - [ps_signal] on a process ({!Consort_cap.Rights.modify}): [offset] = a signal number of this
      system, one of {!signals}.
    - [std_destroy] on a process: kills it (SIGKILL); [std_info] on a process: one line;
      [std_status] on the server: one line per process. *)

val ps_exec : int
val ps_wait : int
val ps_signal : int

type kind = Exited | Signaled | Limit | Killed | Failed

val kind_to_int : kind -> int
val kind_of_int : int -> kind option

val signals : (string * int) list
(** The signals a client may send, by name, with OCaml's numbers ([Sys.sigint], ...). *)

val signal_to_system : int -> int
val signal_of_system : int -> int

val signal_name : int -> string
(** Of an OCaml signal number. *)

val command_name : int -> string
