(* The public types of the group runtime ({!Group}), their printers, and its tunables. *)

open Consort

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

type transitional = Group_evs.transitional = {
  ending : string;
  next : string;
  survivors : string array;
}

let pp_transitional = Group_evs.pp_transitional

type callbacks = {
  view : view_info -> unit;
  cast : origin:string -> string -> unit;
  send : origin:string -> string -> unit;
  block : unit -> unit;
  flow : bool -> unit;
  exit : unit -> unit;
}

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

type error = Group_queue.error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Not_member of string
  | Leaving
  | Exited
  | Not_primary of string

let pp_error ppf = function
  | Flow_control -> Fmt.string ppf "flow control is full: wait for flow false"
  | Too_big { size; max } ->
      Fmt.pf ppf "message of %d bytes, over the largest this stack carries (%d)" size max
  | Not_member id -> Fmt.pf ppf "%s is not a member of the view" id
  | Leaving -> Fmt.string ppf "this member is leaving the group"
  | Exited -> Fmt.string ppf "this member has left the group"
  | Not_primary q -> Fmt.pf ppf "this member's view is not primary: %s" q

type join_error =
  | Bad_address of { what : string; addr : string; reason : string }
  | Bad_stack of string
  | Cannot_open of Transport.error
  | Cannot_join_discovery of Transport.error

type stack_error =
  | Incompatible of { peer : string; ours : string; theirs : string }
  | Unknown_stack of { peer : string; stack : string; reason : string }

let pp_stack_error ppf = function
  | Incompatible { peer; ours; theirs } ->
      Fmt.pf ppf "%s runs another stack (%s, here %s): no merge until one switches" peer theirs ours
  | Unknown_stack { peer; stack; reason } ->
      Fmt.pf ppf "%s runs stack %s, which this member cannot build: %s" peer stack reason

type switch_error = Not_a_stack of string | Changes_xfer | Not_running

type migrate_error =
  | Bad_new_address of { addr : string; reason : string }
  | Cannot_move of Transport.error
  | Gone

let pp_migrate_error ppf = function
  | Bad_new_address { addr; reason } -> Fmt.pf ppf "bad address %S to move to: %s" addr reason
  | Cannot_move e -> Fmt.pf ppf "cannot open the address to move to: %a" Transport.pp_error e
  | Gone -> Fmt.string ppf "this member has left the group"

let pp_switch_error ppf = function
  | Not_a_stack e -> Fmt.pf ppf "the layers do not make a group's stack: %s" e
  | Changes_xfer ->
      Fmt.string ppf
        "a switch cannot add or remove state transfer (Xfer): the state's callbacks are given when \
         a member joins; leave and join again with or without it"
  | Not_running -> Fmt.string ppf "this member has left the group"

let pp_join_error ppf = function
  | Bad_address { what; addr; reason } -> Fmt.pf ppf "bad %s address %S: %s" what addr reason
  | Bad_stack e -> Fmt.pf ppf "the layers do not make a stack: %s" e
  | Cannot_open e -> Fmt.pf ppf "cannot open the member's address: %a" Transport.pp_error e
  | Cannot_join_discovery e -> Fmt.pf ppf "cannot join the discovery group: %a" Transport.pp_error e

let pp_view_info = Group_view.pp_info

module Side = Side

module Param = struct
  let heal_interval = "group.heal_interval"
  let merge_timeout = "group.merge_timeout"
  let install_retry = "group.install_retry"
  let leave_timeout = "group.leave_timeout"
  let queue = "group.queue"
  let migrate_drain = "group.migrate_drain"
  let migrate_timeout = "group.migrate_timeout"

  let () =
    Params.register queue
      (Params.Int (1024 * 1024))
      ~doc:
        "bytes of messages (64 more each) the application may make while a view change flushes; \
         beyond, cast and send refuse with Flow_control";
    Params.register heal_interval
      (Params.Time (Time.of_ms 500))
      ~doc:"period of a coordinator's discovery messages to other partitions";
    Params.register merge_timeout
      (Params.Time (Time.of_ms 2000))
      ~doc:"how long a partition that asked to merge waits for the new view";
    Params.register install_retry
      (Params.Time (Time.of_ms 100))
      ~doc:"period at which a new view is resent to members that have not acknowledged it";
    Params.register migrate_drain
      (Params.Time (Time.of_ms 10_000))
      ~doc:
        "how long a member that moved keeps its old address open for members that have not \
         acknowledged the move (it closes it as soon as all have)";
    Params.register migrate_timeout
      (Params.Time (Time.of_ms 2000))
      ~doc:
        "how long a member that moved waits for a first member to acknowledge the move; if none \
         does (nothing reaches the new address), it goes back to the address it left (keep it \
         below suspect.timeout)";
    Params.register leave_timeout
      (Params.Time (Time.of_ms 3000))
      ~doc:"how long a leaving member waits for the view without it before it goes anyway"
end
