(** What every [consort] command shares: the exit status convention, argument converters that refuse
    meaningless values (a negative count, a zero duration) when the command line is read, and the
    one-line error.

    {2 Exit status}

    {v
    0    done (for checkers and simulations: and every check passed)
    1    the command ran and what it checked failed (a violation, a failing seed)
    2    refused: a value the command could not use (a file, directory, address, key, capability,
         name) or an environment that failed it (a closed standard stream, a missing directory,
         a permission, a full disk); nothing was done
    3    outcome unknown: a peer was lost while a request was under way
    124  the command line could not be read: an unknown command or option, a missing or surplus
         argument, a value not of its option's type (not a number, out of its range, not one of
         its words)
    125  internal error: a defect in Consort, never an expected outcome
    v}

    The one rule between 2 and 124: 124 is decided from the command line's text alone, before
    anything else is looked at; whatever is found when the command looks at the world (a path, an
    address, a peer, the disk, the standard streams, a name it looks up) is 2. A path is never
    checked when the command line is read: a missing or unusable file is 2.

    Standard streams: a closed standard output refuses every command before it does anything (2;
    give it /dev/null to discard the output); a closed standard input refuses the commands that read
    it (2) and no other; a closed standard error is written to nowhere. An error of the system that
    escapes a command (a [Sys_error], a [Unix_error] such as [ENOSPC], [EACCES] or [EBADF]) is the
    environment's: one line and 2, never 125.

    Every failure prints one line on standard error: the command's name and what happened. *)

val ok : int
val checks_failed : int
val refused : int
val unknown : int

val exits : Cmdliner.Cmd.Exit.info list
(** The convention above, for [Cmd.info ~exits]. *)

val command_line_exits : Cmdliner.Cmd.Exit.info list
(** Its 124 and 125, which every command's own list of exit statuses ends with (never cmdliner's
    defaults, whose 123 Consort does not use). *)

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

val stdin_closed : unit -> bool
(** Whether standard input was closed when {!main} started (it is then held by /dev/null, opened
    write-only so that reading it still fails). *)

val stdout_closed : unit -> bool
(** Whether standard output was closed when {!main} started. *)

val with_stdin : ?instead:string -> string -> (unit -> int) -> int
(** [with_stdin cmd k] is [k ()], or, when standard input is closed, the refusal of [cmd] in one
    line (exit 2) before anything is done, naming the option [instead] that does without it. Every
    command that reads standard input starts with it. *)

val unwritable_dir : string -> string option
(** [unwritable_dir d] is why files cannot be made in directory [d] (it is missing, not a directory,
    or not writable and searchable by this process), if they cannot: what a [--save DIR] is checked
    with before a benchmark runs. *)

val save_result : dir:string -> name:string -> string -> (string, string) result
(** [save_result ~dir ~name text] writes [text] and a newline to [dir/name-YYYYMMDD-HHMMSS.json]
    (the time in UTC) and is that file's path, or why it could not be written (a directory gone
    since {!unwritable_dir} checked it, a full disk): what a benchmark's [--save DIR] does at the
    end of its run. *)

val main : Cmdliner.Cmd.Exit.code Cmdliner.Cmd.t -> 'a
(** Runs a command line and exits with its status. Closed standard streams are taken by /dev/null
    first (see above); a closed standard output refuses the command. An error of the system that
    escapes a command, or output that cannot be written at the end (a full disk), is reported in one
    line with status 2. Any other exception that escapes a command (a defect) is reported in one
    line as an internal error with exit status 125 instead of a backtrace; the command line's own
    errors keep cmdliner's 124. *)

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

type progress
(** A progress line on standard error for a long command (a benchmark's runs), drawn only when
    standard error is a terminal. *)

val progress : string -> total:int -> progress
(** [progress what ~total]: a line [WHAT: run K of TOTAL] for {!step}, if standard error is a
    terminal and [total > 1]; otherwise {!step} and {!finish} do nothing. *)

val step : progress -> int -> unit
(** [step p k]: run [k] (from 1) starts: the line is redrawn in place (at most 10 times a second,
    always for the first and the last run). *)

val finish : progress -> unit
(** Erases the line (before anything else is written, and at the end). *)

val with_progress : string -> total:int -> (progress -> 'a) -> 'a
(** [with_progress what ~total f] is [f p], the line erased when [f] returns or raises. *)
