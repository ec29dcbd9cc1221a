(** Member processes on loopback, for tests and the demo: start, feed, kill, partition, heal, and
    read their logs.

    Each member has a fixed address, a log file per incarnation, and a drop file through which a
    partition is imposed (the member drops datagrams from the addresses listed there; see
    [Member.config.drop_file]). *)

type member = private {
  idx : int;
  addr : string;
  dir : string;
  mutable pid : int option;
  mutable input : out_channel option;
  mutable incarnation : int;
  mutable logs : string list;  (** one file per incarnation, newest first *)
}

val create : dir:string -> int -> member list
(** [create ~dir n] picks [n] free ports on 127.0.0.1; files go in [dir]. *)

val create_at : dir:string -> string list -> member list
(** [create_at ~dir addrs]: one member at each of [addrs] (in network namespaces, say). *)

val start :
  exe:string ->
  ?wrap:string list ->
  ?extra:string list ->
  ?params:string ->
  ?props:string ->
  group:string ->
  peers:string list ->
  ?output:string ->
  member ->
  unit
(** [start ~exe ~group ~peers m] runs [exe member ...] (after the command [wrap], such as
    [ip netns exec NAME], and with [extra] arguments) as a new incarnation of [m], its standard
    input a pipe ({!cast} writes to it), its output appended to [output] (default: discarded). *)

val cast : member -> string -> unit
(** [cast m line] has [m] cast [line]. *)

val kill : member -> unit
(** SIGKILL, then reap: only this process, by PID. *)

val reap : member -> bool
(** [true] once the process has ended (reaped without waiting). *)

val leave_all : member list -> timeout:float -> bool
(** Closes every input (the members leave), waits up to [timeout] seconds for all to end, kills any
    left; [true] if all ended by themselves. *)

val partition : member list list -> unit
(** [partition sides]: members of each side drop datagrams from all others. *)

val heal : member list -> unit
val wait_until : timeout:float -> (unit -> bool) -> bool

val current_view : member -> (string * string list) option
(** The last view in the member's current log. *)

val same_view : member list -> bool
(** All these members' last views are one view with exactly them in it. *)

val all_logs : member list -> string list

val deliveries : member -> int
(** Deliveries in the current incarnation's log. *)

val events : string -> Consort_spec.Log.event list
(** The complete, well-formed lines of a log file. *)

val remove_dir : string -> unit
(** [remove_dir dir] removes the files in [dir], then [dir] (no error if it is already gone). *)
