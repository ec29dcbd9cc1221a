(** Join latency: [n] member processes started at once on 127.0.0.1, each told every address, from
    the moment each process is created to the moment it prints a view with all [n] members; beside
    the time from creation to its first view (the view of itself alone, installed at start), which
    is the cost of starting a process. *)

type row = {
  stack : string;  (** ["vsync"], or sealed: ["Privacy"] (no rekeying), ["Privacy+Rekey"] *)
  size : int;  (** members in the group *)
  reps : int;  (** groups started *)
  start_ms : float array;  (** process creation to first view, one per member and group *)
  join_ms : float array;  (** process creation to the full view, one per member and group *)
  formed_ms : float array;  (** first creation to the last member's full view, one per group *)
}

val run :
  exe:string ->
  ?sizes:int list ->
  ?reps:int ->
  ?params:string ->
  ?seal:bool ->
  unit ->
  (row list, string) result
(** [run ~exe ()] starts groups of 2 to 8 members (default), [reps] times each (default 3), with
    [exe member] ([exe] is the [consort] executable); every member's log must end with the same full
    view. With [seal], each size also runs sealed with [Privacy] under one key, without and with
    per-view keys (each view change then draws a key and wraps it for each member with X25519), in
    the same run. *)

val rekey_cost : ?reps:int -> int -> float * float
(** [rekey_cost n]: the cryptography of one rekey of a view of [n] in this process, in microseconds
    (medians of [reps], default 50): the maker drawing the key and wrapping it for the [n - 1]
    others, and a member unwrapping its own. *)

val pp_table : row list Fmt.t
val to_json : row list -> string
