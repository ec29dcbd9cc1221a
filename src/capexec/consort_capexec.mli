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

val exec_cmd : name:string -> path:string -> int Cmdliner.Cmd.t
(** The command: [name] in its parent, [path] its full name in examples. *)
