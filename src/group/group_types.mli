(** The public types of the group runtime, their printers and its tunables, included in {!Group},
    which documents them. *)

type view_info = Group_view.info = {
  vid : string;
  ltime : int;
  members : string array;
  rank : int;
  coordinator : string;
  joined : string list;
  left : string list;
  why : (string * string) list;
}

val pp_view_info : view_info Fmt.t

type error = Group_queue.error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Not_member of string
  | Leaving
  | Exited
  | Not_primary of string

val pp_error : error Fmt.t

type join_error =
  | Bad_address of { what : string; addr : string; reason : string }
  | Bad_stack of string
  | Cannot_open of Consort.Transport.error
  | Cannot_join_discovery of Consort.Transport.error

val pp_join_error : join_error Fmt.t

type stack_error =
  | Incompatible of { peer : string; ours : string; theirs : string }
  | Unknown_stack of { peer : string; stack : string; reason : string }

val pp_stack_error : stack_error Fmt.t

type switch_error = Not_a_stack of string | Changes_xfer | Not_running

val pp_switch_error : switch_error Fmt.t

type transitional = Group_evs.transitional = {
  ending : string;
  next : string;
  survivors : string array;
}

val pp_transitional : transitional Fmt.t

type migrate_error =
  | Bad_new_address of { addr : string; reason : string }
  | Cannot_move of Consort.Transport.error
  | Gone

val pp_migrate_error : migrate_error Fmt.t

type callbacks = {
  view : view_info -> unit;
  cast : origin:string -> string -> unit;
  send : origin:string -> string -> unit;
  block : unit -> unit;
  flow : bool -> unit;
  exit : unit -> unit;
}

module Side = Side

type rekey = Group_rekey.keys = {
  public : string;
  draw :
    vid:string ->
    me:string ->
    context:string ->
    (string * string) list ->
    (string * string) list * (unit -> unit);
  unwrap :
    vid:string ->
    me:string ->
    context:string ->
    installer:string * string ->
    string ->
    (unit -> unit) option;
}

module Param : sig
  val heal_interval : string
  val merge_timeout : string
  val install_retry : string
  val leave_timeout : string
  val queue : string
  val migrate_drain : string
  val migrate_timeout : string
end
