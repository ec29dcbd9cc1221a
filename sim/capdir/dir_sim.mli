(** The [dir-replicated] scenario: three replicas of the directory server (the key-value store's
    replication over {!Dir.Rsm}) in the simulator, clients looking up, installing (one row, or two
    at once) and deleting rows of the root directory while replicas crash (some in the middle of a
    write to disk), restart from their disk, are partitioned away and healed; then every replica is
    stopped and restarted from disk. The history of each row (a lookup a read, an install a write, a
    delete a delete) must be linearizable (the final reads included, so no acknowledged write may be
    lost), and the replicas must end with the same state. *)

val name : string
val doc : string

type outcome = Consort_sim_kv.Rsm_sim.outcome
(** What one seeded run found. *)

val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome

(** [dir-disk-faults]: the same schedules with storage faults ({!Consort_sim_kv.Rsm_sim.config}'s
    [disk_faults]). *)
module Disk_faults : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome
end

(** [dir-lost-dir]: the same schedules with data directories that have an identity, and a replica
    restarted on an empty directory or on another cluster's beside a stale one
    ({!Consort_sim_kv.Rsm_sim.config}'s [lost_dir]), as [kv-lost-dir] for the key-value store. *)
module Lost_dir : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome
end

val scenarios : Consort_sim.Scenario.t list
(** [dir-replicated], [dir-disk-faults] and [dir-lost-dir], for the registry. *)
