(** Membership on 127.0.0.1 with real [consort member] processes: a member joining a running group
    of [n - 1] (creation to the view of [n] at every member), the coordinator killed with SIGKILL
    (kill to the survivors' next view), and a member killed and started again at its address while
    every member casts (a line every 20 ms each): the time until it is back in the view of all, and
    the views each survivor installs on the way (one when a restart costs one view change). Several
    binaries ([consort] executables, such as a build before a change and one after) are measured in
    one run, each round going through every binary in turn. No figure is checked against a
    threshold. *)

type binary = { label : string;  (** the name of its rows *) exe : string  (** its path *) }

type row = {
  binary : string;  (** the label of the binary measured *)
  measure : string;  (** the key in the JSON line, such as ["restart_views"] *)
  what : string;  (** the words of the table *)
  samples : float array;  (** one per round (per member and round for the view counts) *)
}

type result = {
  rounds : int;
  size : int;  (** members of the group in the failover and restart runs *)
  sizes : int list;  (** group sizes joined *)
  binaries : binary list;
  load_start : string;  (** load average (1, 5 and 15 min) at the start *)
  load_end : string;
  cpus : int;  (** CPUs online; processes are not pinned *)
  rows : row list;
}

val run :
  binaries:binary list ->
  ?rounds:int ->
  ?size:int ->
  ?sizes:int list ->
  ?params:string ->
  ?measures:[ `Join | `Failover | `Restart ] list ->
  unit ->
  (result, string) Stdlib.result
(** [run ~binaries ()] measures each binary [rounds] times (default 5): joins into groups of [sizes]
    (default 3 and 5), a coordinator's failover and a restart in groups of [size] (default 3), the
    restarted member started again 0.5, 1.5 or 2.5 s after its kill (by round); every group fresh.
    [params] is given to every member ([consort member --params]); [measures] (default all three)
    leaves the others out. SIGPIPE is ignored while it runs. *)

val pp_table : result Fmt.t
val to_json : result -> string
