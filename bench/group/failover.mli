(** Failure detection and view change: a group of member processes on 127.0.0.1 forms, one member is
    killed with SIGKILL, and the survivors are timed from the kill to the moment each prints a view
    without it; beside the configured silence after which a member is suspected ([suspect.timeout],
    5 s by default), which bounds detection from below. *)

type rep = {
  victim : [ `Coordinator | `Member ];  (** the killed member was the view's coordinator or not *)
  detect_ms : float array;  (** kill to new view, one per survivor *)
}

type result = {
  size : int;
  timeout_ms : float;  (** [suspect.timeout] in force *)
  interval_ms : float;  (** [suspect.interval] in force *)
  reps : rep list;
}

val run :
  exe:string -> ?size:int -> ?reps:int -> ?params:string -> unit -> (result, string) Stdlib.result
(** [run ~exe ()] forms a group of [size] (default 3), kills a member, and times the survivors,
    [reps] times (default 3), with a fresh group each time, killing the coordinator every second
    time and each time at another point of the heartbeat period; [params] overrides tunables as
    [consort member --params] does. *)

val kill_once :
  exe:string ->
  ?params:string ->
  size:int ->
  rep:int ->
  victim:[ `Coordinator | `Member ] ->
  phase:float ->
  unit ->
  (rep, string) Stdlib.result
(** [kill_once ~exe ~size ~rep ~victim ~phase ()] is one run of {!run}: a fresh group of [size]
    ([rep] names it and seeds its members), the [victim] killed [phase] of a heartbeat interval
    after the group formed (0 to 1), the survivors timed. *)

val pp_table : result Fmt.t
val to_json : result -> string
