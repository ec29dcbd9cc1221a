(** The [kv-linearizable] scenario: three replicas of the key-value store in the simulator, clients
    issuing concurrent operations while replicas crash (some in the middle of a write to disk),
    restart from their disk, are partitioned away and healed; then every replica is stopped and
    restarted from disk. The clients' history must be linearizable (the final reads included, so no
    acknowledged write may be lost), and the replicas must end with the same state. *)

val name : string
val doc : string

type outcome = Rsm_sim.outcome
(** What one seeded run found. *)

val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome

(** [kv-lost-dir]: the same schedules with a lost data directory ({!Rsm_sim.config.lost_dir}). *)
module Lost_dir : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome
end

(** [kv-disk-faults]: the same schedules with storage faults ({!Rsm_sim.config.disk_faults}). *)
module Disk_faults : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome
end

(** [kv-ack-race]: the sequencer's acknowledgement overtakes its own cast, then it crashes before
    the cast reaches anyone ({!Rsm_sim.Make.run}'s [ack_race]). *)
module Ack_race : sig
  val name : string
  val doc : string
  val run : ?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome
end

val scenarios : Consort_sim.Scenario.t list
(** [kv-linearizable], [kv-disk-faults], [kv-lost-dir] and [kv-ack-race], for the registry. *)
