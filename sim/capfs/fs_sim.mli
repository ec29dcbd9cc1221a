(** The [fs-crash] simulation: a client and a file server over the simulator's lossy, duplicating,
    reordering network, the server crashing and restarting (losing its uncommitted files and RPC
    sessions, keeping what it committed).

    Checked at the end, against the store itself: every file whose put was acknowledged holds
    exactly its bytes (unless a destroy of it had an unknown outcome); every acknowledged destroy
    took effect; every file the store serves holds the whole bytes of one put (nothing
    half-written); no put is stored twice (no create carried out twice). A put refused for a reason
    other than the server's restart is a violation too. *)

val name : string
val doc : string

type outcome = {
  violations : string list;  (** empty when every check passed *)
  puts : int;
  acked : int;  (** puts that returned a capability *)
  unknown : int;  (** puts cut short by a crash *)
  restarts : int;
  datagrams : int;  (** datagrams delivered *)
  end_time : Consort.Time.t;
  trace_hash : string;
}

val run : ?trace:out_channel -> seed:int -> unit -> outcome
(** [run ~seed ()] runs one seeded schedule. The store lives in a fresh directory under [/dev/shm]
    (or the temporary directory), removed after. *)

(** [fs-disk-faults]: the same with storage faults ({!Consort_util.Sim_disk}): for a while the
    server's disk fills, fails writes or fsyncs; a put or destroy the server refuses for it (no
    space, a system error) is counted as not done or unknown. In both scenarios every crash is a
    power loss: what was not fsynced is lost or torn. *)
module Disk_faults : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> seed:int -> unit -> outcome
end

val scenarios : Consort_sim.Scenario.t list
(** [fs-crash] and [fs-disk-faults], for the registry: puts as sent, acknowledged puts as delivered
    (they take no tunables). *)
