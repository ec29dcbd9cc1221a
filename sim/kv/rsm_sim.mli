(** The simulation of a replicated state machine ({!Rsm.MACHINE}), shared by the [kv-linearizable]
    and [dir-replicated] scenarios: three replicas in the simulator, clients issuing concurrent
    operations on three keys while replicas crash (some in the middle of a write to disk), restart
    from their disk, are partitioned away and healed; then every replica is stopped and restarted
    from disk. The disks are simulated ({!Consort_util.Sim_disk}): every stop is a power loss, where
    what was not fsynced is lost or torn; with [disk_faults], disks also fill and fail. The clients'
    history must be linearizable (the final reads of each round included, so no acknowledged write
    may be lost), and the replicas must end with the same state. *)

type outcome = {
  violations : string list;
  ops : int;  (** operations in the history *)
  acked : int;  (** with a known outcome *)
  unknown : int;
  restarts : int;
  datagrams : int;
  end_time : Consort.Time.t;
  trace_hash : string;
}

type config = {
  tag : string;
      (** names the replicas' group, the trace's notes and the scratch directory ([consort-TAG-sim])
      *)
  salt : int;  (** mixed with the seed for the scenario's own random choices *)
  stop_at : Consort.Time.t;  (** clients start no new operation after this *)
  faults_ms : int;  (** each fault strikes within this many ms after 2 s *)
  down_ms : int;  (** a crashed replica restarts 500 ms to 500 + this many ms later *)
  heal_ms : int;  (** a partition heals 500 ms to 500 + this many ms later *)
  reads_at : Consort.Time.t;
      (** the network heals and every replica starts; every key is read 7 s later *)
  all_stop : Consort.Time.t;
      (** every replica stops; all start again 1 s later, and every key is read 7 s after that *)
  until : Consort.Time.t;  (** the end of the run *)
  disk_faults : bool;
      (** during the workload, disks fill, fail writes, fail fsyncs for a while (the replica stops
          at the first fault and is restarted, until the disk is repaired) *)
  lost_dir : bool;
      (** the data directories have an identity ([--new] at first); during the workload one replica
          goes down, then a second, and the third is restarted on an empty directory ([--join]) or
          on one of another cluster of the group (it stops, and is restarted empty) beside the
          first; the second comes back later *)
}

val keys : string array
(** The keys the clients work on, each read at the end of each round. *)

module Make
    (M : Rsm.MACHINE)
    (S :
      Store.S
        with type op = M.op
         and type response = M.response
         and type limits = M.limits
         and type machine = M.t) : sig
  type workload = {
    limits : M.limits option;  (** the stores' limits; [M.default_limits] if [None] *)
    next : int -> M.op * (string * Consort_spec.Linearizable.op) list;
        (** [next c]: client [c]'s next operation (drawn from the scenario's random state), and what
            the checker sees of it: one event per key *)
    label : M.op -> (string * Consort_spec.Linearizable.op) list -> string;
        (** how the trace names an operation *)
    answer :
      M.op ->
      string * Consort_spec.Linearizable.op ->
      M.response ->
      (Consort_spec.Linearizable.response, string) result;
        (** what the checker sees of a response for one event, or why it is a violation *)
    read : string -> M.op * (string * Consort_spec.Linearizable.op) list;
        (** [read key]: the operation that reads [key] at the end of a round *)
  }

  val run :
    ?ack_race:bool ->
    config ->
    (seed:int -> Random.State.t -> workload) ->
    ?trace:out_channel ->
    ?params:Consort.Params.t ->
    seed:int ->
    unit ->
    outcome
  (** [run config workload ~seed ()] runs one seeded schedule; [workload] is made once per run, with
      the scenario's random state. With [ack_race] (default [false]), instead of the random faults:
      once the sequencer has applied and acknowledged its own cast, and its acknowledgement waits at
      every other member of the view for the cast (which the links' jitter lets it overtake), the
      sequencer is cut off and crashed (its cast never arrives), and restarted 4 to 6 s later.

      In every run, each acknowledgement a replica counts must name the orders it applied itself:
      the chain of the orders of the view after as many orders, as the acknowledgement's origin
      applied them (the replicas' [observe]). *)
end

val scenario :
  name:string ->
  doc:string ->
  (?trace:out_channel -> ?params:Consort.Params.t -> seed:int -> unit -> outcome) ->
  Consort_sim.Scenario.t
(** A replicated state machine's scenario for the registry: its operations as sent, those with a
    known outcome as delivered. *)
