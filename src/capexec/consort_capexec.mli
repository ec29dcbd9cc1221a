(** [consort cap exec]: running a program on a process server from the command line. The [consort]
    command and the small [consort-exec] binary (which starts several times faster, having only this
    to initialise) share it. *)

open Consort_cap

val rpc_config : Rpc.config ref
(** The RPC tunables, set from [--params] before a command runs. *)

val refused : ('a, Format.formatter, unit, int) format4 -> 'a
(** Prints [consort: MESSAGE] (one line) on standard error: exit status 2, nothing was done. *)

val unknown : ('a, Format.formatter, unit, int) format4 -> 'a
(** The same, exit status 3: the outcome is unknown. *)

val parse : string -> string -> (Cap.t, string) result
(** [parse what s]: the capability [s] in text form (blanks around it ignored). *)

val root_cap : string option -> (Cap.t, string) result
(** The root directory: [--root], else [CONSORT_ROOT], else the first line of [~/.consort/root]. *)

val is_cap : string -> bool
(** [is_cap s]: [s] is a capability in text form ([cap1:...]), not a path. *)

val path_error : Consort_capdir.Dir_client.error Consort_capdir.Path.error -> string
(** A path's resolution error, on one line. *)

val resolve :
  config:Rpc.config -> ?locate:string -> ?root:string -> string -> string -> (Cap.t, string) result
(** [resolve ~config what s]: a capability given on the command line, as text ([cap1:...]) or as a
    path from the root directory. *)

(** {1 Running a command for someone else}

    The agent ([consort cap agent]) runs this command for a client process: with the client's
    environment and standard streams, and its own nodes, kept warm between requests. *)

type host = {
  getenv : string -> string option;  (** [CONSORT_ROOT], [HOME] *)
  root_file : string -> string option;
      (** [~/.consort/root]'s contents; [None]: no such file. May raise [Sys_error]. *)
  say : string -> unit;  (** One line on standard error, after [consort: ]. *)
  stdout : (string -> unit) option;  (** The program's output (default: this process's). *)
  stderr : (string -> unit) option;
  output : ((string -> (unit -> unit) -> unit) * (string -> (unit -> unit) -> unit)) option;
      (** {!start} only, instead of [stdout] and [stderr]: writers that call their continuation once
          the bytes are written (the program's circuit is read again only then). *)
  stdin : Unix.file_descr;  (** The program's input, unless [-n]. *)
  with_stdin : (unit -> int) -> int;  (** Refuses when standard input is closed. *)
  interrupt : unit -> unit -> bool;
      (** Called once the program is about to start; gives the function asked whether to interrupt
          it. *)
  hangup : unit -> bool;
      (** Asked as often: [true] when the caller is gone (the program is then hung up on). *)
  nodes :
    ?locate:string ->
    control:bool ->
    unit ->
    (Rpc_udp.node * Rpc_udp.node option * (unit -> unit), string) result;
      (** A node on a loop (and a second one when [control]), and what to do when done with them. *)
  circuits : Consort_capproc.Proc_client.circuits option;
      (** A port for the program's circuits kept across starts, on the first of [nodes]' nodes. *)
}

val own_host : host
(** This process's environment, streams, SIGINT and new nodes. *)

type request = {
  locate : string option;
  server : string;
  program : string;
  args : string list;
  caps : string list;
  root : string option;
  with_root : bool;
  cpu : float;
  memory : int;
  time : float;
  no_stdin : bool;
  show_cap : bool;
}
(** A command line, parsed. *)

val run : host -> request -> int
(** Runs it: the exit status, the messages said on [host]. *)

val start : host -> request -> (int -> unit) -> unit
(** [start host req k]: {!run} without waiting for the program, for a caller that runs several at
    once on one loop (the agent): resolves the paths and checks the command (waiting for those
    answers, so not from inside a callback of the nodes' loop), starts the program and calls [k]
    once with the exit status, at once when refused, else from the loop once the program ended and
    its output was passed on. [host.with_stdin] is not used: the caller checked its streams. *)

val agent_cmd :
  (string option
  * request
  * ((Logs.level option * (string * Logs.level option) list) * Consort_cli.log_format))
  Cmdliner.Cmd.t
(** The command line of [consort-exec], parsed but not run: [--params], the request, the logging
    options. *)

val exec_cmd : name:string -> path:string -> int Cmdliner.Cmd.t
(** The command: [name] in its parent, [path] its full name in examples. *)
