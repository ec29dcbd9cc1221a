(** Child processes and shell commands for the network benchmarks.

    A child runs a program, optionally inside a network namespace ([ip netns exec], which execs the
    program in place, so the child's process id is the program's). Its standard output and error go
    to a pipe that is read without blocking, either by {!pump} from an event loop or by the waiting
    functions here. Every child is remembered until it is reaped, so {!kill_all} can end the ones
    still running, by process id. *)

type t

val spawn : ?ns:string -> ?stdin:bool -> string list -> t
(** [spawn ?ns argv] starts [argv] (inside namespace [ns] if given). With [stdin] (default [false])
    its standard input is a pipe fed by {!send_line}; otherwise it is [/dev/null].
    @raise Unix.Unix_error if the program cannot be started. *)

val pid : t -> int

val fd : t -> Unix.file_descr
(** [fd t] is the read end of the child's output pipe (non-blocking). *)

val pump : t -> unit
(** [pump t] reads whatever output is available without blocking. *)

val eof : t -> bool
(** [eof t] is [true] once the child's output pipe has closed (the child has exited, or closed its
    output). *)

val output : t -> string
(** Everything the child printed so far. *)

val find_line : t -> prefix:string -> string option
(** [find_line t ~prefix] is the first complete output line starting with [prefix]. *)

val lines : t -> prefix:string -> string list
(** [lines t ~prefix] is every complete output line starting with [prefix], in order. *)

val wait : t -> timeout:float -> (unit -> bool) -> bool
(** [wait t ~timeout ready] reads the child's output until [ready ()] (and is [true]), its output
    ends or [timeout] seconds pass (and is [ready ()]). *)

val wait_line : t -> prefix:string -> timeout:float -> (string, string) result
(** [wait_line t ~prefix ~timeout] blocks (up to [timeout] seconds) until a line starting with
    [prefix] has been printed; [Error] says why not, with the child's output. *)

val send_line : t -> string -> unit
(** [send_line t s] writes [s] and a newline to the child's input.
    @raise Invalid_argument if the child was spawned without [stdin]. *)

val write : t -> Bytes.t -> int -> int -> unit
(** [write t b off len] writes [len] bytes of [b] from [off] to the child's input, all of them
    (blocking until the child has taken what its pipe cannot hold).
    @raise Invalid_argument if the child was spawned without [stdin].
    @raise Unix.Unix_error if the child's input is closed. *)

val close_stdin : t -> unit

val finish : t -> timeout:float -> (string, string) result
(** [finish t ~timeout] reads the child's output to the end, reaps it and is its output if it exited
    with status 0; after [timeout] seconds it kills the child (SIGKILL to its process id) and is an
    [Error]. *)

val kill : t -> unit
(** [kill t] sends SIGKILL to [t]'s process id if it has not been reaped, and reaps it. *)

val kill_all : unit -> unit
(** [kill_all ()] is {!kill} of every child not reaped yet. *)

val interrupted : bool ref
(** Set (by a signal handler, say) to make every wait here give up at once. *)

val run : string -> (string, string) result
(** [run cmd] runs shell command [cmd] and is its output (standard output and error) if it
    succeeded, or an [Error] with the command and its output. *)

val quiet : string -> unit
(** [quiet cmd] runs [cmd], ignoring its output and status. *)

val result_fields : string -> string -> (string * string) list option
(** [result_fields output prefix] is the [key=value] words of the first line of [output] that starts
    with [prefix]. *)
