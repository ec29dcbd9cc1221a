(** What every [consort] command shares: the exit status convention, argument converters that refuse
    meaningless values (a negative count, a zero duration) when the command line is read, and the
    one-line error.

    {2 Exit status}

    {v
    0    done (for checkers and simulations: and every check passed)
    1    the command ran and what it checked failed (a violation, a failing seed)
    2    refused: a bad value, file, address, key or capability; nothing was done
    3    outcome unknown: a peer was lost while a request was under way
    124  the command line could not be read (unknown option, missing argument)
    125  internal error: a defect in Consort, never an expected outcome
    v}

    Every failure prints one line on standard error: the command's name and what happened. *)

val ok : int
val checks_failed : int
val refused : int
val unknown : int

val exits : Cmdliner.Cmd.Exit.info list
(** The convention above, for [Cmd.info ~exits]. *)

val positive_int : int Cmdliner.Arg.conv
(** An integer of at least 1. *)

val natural : int Cmdliner.Arg.conv
(** An integer of at least 0. *)

val positive_float : float Cmdliner.Arg.conv
(** A finite number greater than 0 (seconds, sizes). *)

val fraction : float Cmdliner.Arg.conv
(** A number from 0 to 1 (a probability). *)

val fail : string -> ('a, Format.formatter, unit, int) format4 -> 'a
(** [fail cmd fmt ...] prints [consort CMD: message] on one line on standard error (newlines in the
    message are folded into spaces) and returns {!refused}. *)

val one_line : string -> string
(** A message on one line: newlines and runs of white space folded into single spaces, trimmed. *)

val main : Cmdliner.Cmd.Exit.code Cmdliner.Cmd.t -> 'a
(** Runs a command line and exits with its status. An exception that escapes a command (a defect) is
    reported in one line as an internal error with exit status 125 instead of a backtrace; the
    command line's own errors keep cmdliner's 124. *)

val examples : string -> Cmdliner.Manpage.block list
(** [examples "cap fs get"] is the EXAMPLES section of that command's manual (a command path below
    [consort]), from one table kept in this library; empty for a command the table does not know
    (the CLI test requires every command to have one). *)

val info :
  ?man:Cmdliner.Manpage.block list ->
  ?envs:Cmdliner.Cmd.Env.info list ->
  ?exits:Cmdliner.Cmd.Exit.info list ->
  ?hidden:bool ->
  path:string ->
  doc:string ->
  string ->
  Cmdliner.Cmd.info
(** [info ~path ~doc name] is [Cmd.info name] with the exit statuses above (or [exits]), [man]
    followed by the command's EXAMPLES, and, with [~hidden:true], left out of its parent's list of
    commands (the internal commands that tests and benchmarks start). *)

(** {2 Logs} *)

type log_format = Text | Json

val log_levels : (Logs.level option * (string * Logs.level option) list) Cmdliner.Arg.conv
(** [LEVEL[,SOURCE=LEVEL...]]: a level for every source, then levels for sources named (a prefix
    ending in [.] names a family: [consort.tcp=debug], [consort.=info]). Levels: [quiet], [error],
    [warning], [info], [debug]. *)

val setup_logs :
  ?verbose:bool -> log_format -> Logs.level option * (string * Logs.level option) list -> unit
(** Installs a reporter on standard error that writes one line per record, with a UTC timestamp, the
    level and the source (or one JSON object per line), and sets the levels. [verbose] raises the
    default to [info]. *)

val set_log_context : (unit -> (string * string) list) -> unit
(** [set_log_context f]: each JSON record also carries the fields [f ()] gives when it is written
    (such as [member], [group] and [view] for a member: the fields known then), after [t], [level],
    [src] and [msg] (fields of those names are left out). *)

val logging : unit Cmdliner.Term.t
(** [--log-level LEVELS] (default [warning]) and [--log-format text|json]; evaluating it installs
    the reporter. *)

val log_options :
  ((Logs.level option * (string * Logs.level option) list) * log_format) Cmdliner.Term.t
(** The same two options, read but not applied (for commands that apply them with {!setup_logs}
    themselves, with their own [--verbose]). *)
