open Consort
module L = Consort_spec.Linearizable
module S = Rsm_sim.Make (Machine.Rsm) (Store)

let name = "kv-linearizable"

let doc =
  "3 replicas of the key-value store; clients issue concurrent gets, puts, deletes and \
   compare-and-sets while replicas crash (some mid-write), restart from disk, are partitioned and \
   healed, then all restart from disk; the history is linearizable and the replicas agree"

type outcome = Rsm_sim.outcome

let config =
  {
    Rsm_sim.tag = "kv";
    salt = 0x6b76;
    stop_at = Time.of_sec 13.;
    faults_ms = 9_000;
    down_ms = 4000;
    heal_ms = 7000;
    reads_at = Time.of_sec 16.;
    all_stop = Time.of_sec 27.;
    until = Time.of_sec 45.;
    disk_faults = false;
    lost_dir = false;
  }

(* Gets, puts, deletes and compare-and-sets; a compare-and-set mostly expects the value last
   written to its key. *)
let workload ~seed:_ rng =
  let keys = Rsm_sim.keys in
  let made = ref 0 in
  let recent = Hashtbl.create 8 in
  let next c =
    incr made;
    let k = keys.(Random.State.int rng (Array.length keys)) in
    let v = Printf.sprintf "%d.%d" c !made in
    let op =
      match Random.State.int rng 10 with
      | 0 | 1 | 2 -> Op.Get k
      | 3 | 4 | 5 -> Op.Put (k, v)
      | 6 -> Op.Del k
      | _ ->
          let expect =
            match Hashtbl.find_opt recent k with
            | Some e when Random.State.int rng 4 > 0 -> e
            | _ -> "none"
          in
          Op.Cas { key = k; expect; set = v }
    in
    (match op with
    | Op.Put (k, v) | Op.Cas { key = k; set = v; _ } -> Hashtbl.replace recent k v
    | _ -> ());
    (op, [ (k, Op.to_spec op) ])
  in
  let answer op _ r =
    match Op.response_to_spec r with
    | Some resp -> Ok resp
    | None ->
        Error
          (Printf.sprintf "%s refused: %s" (Fmt.str "%a" Op.pp op) (Fmt.str "%a" Op.pp_response r))
  in
  {
    S.limits = None;
    next;
    label = (fun op _ -> Fmt.str "%a" Op.pp op);
    answer;
    read = (fun k -> (Op.Get k, [ (k, Op.to_spec (Op.Get k)) ]));
  }

let run ?trace ?params ~seed () = S.run config workload ?trace ?params ~seed ()

module Lost_dir = struct
  let name = "kv-lost-dir"

  let doc =
    "kv-linearizable with data directories that have an identity: one replica goes down, then a \
     second, and the third is restarted on an empty directory (--join) or on a directory of \
     another cluster of the same group beside the first; the second comes back later; no \
     acknowledged write is lost, the history is linearizable and the replicas agree"

  let run ?trace ?params ~seed () =
    S.run
      { config with tag = "kvlost"; salt = 0x6b6c; lost_dir = true }
      workload ?trace ?params ~seed ()
end

(* The same with storage faults: disks that fill, fail writes, fail fsyncs. *)
module Disk_faults = struct
  let name = "kv-disk-faults"

  let doc =
    "kv-linearizable with storage faults: disks fill (short writes, then ENOSPC), fail writes \
     (EIO) and fsyncs for a while; a replica stops at the first fault, is restarted and stops \
     again until its disk is repaired; every stop loses what was not fsynced; no acknowledged \
     write is lost, the history is linearizable and the replicas agree"

  let run ?trace ?params ~seed () =
    S.run
      { config with tag = "kvdisk"; salt = 0x6b64; disk_faults = true }
      workload ?trace ?params ~seed ()
end

(* The sequencer's acknowledgement that overtakes its own cast, then its crash. *)
module Ack_race = struct
  let name = "kv-ack-race"

  let doc =
    "kv-linearizable with one fault aimed at the acknowledgements: the sequencer applies its own \
     cast and acknowledges it, its acknowledgement reaches every other replica before the cast, \
     and it crashes before the cast reaches anyone; the others apply their own casts in its place \
     at the end of the view and must not count its acknowledgement for them; no acknowledged write \
     is lost, the history is linearizable and the replicas agree"

  let run ?trace ?params ~seed () =
    S.run ~ack_race:true
      {
        config with
        tag = "kvack";
        salt = 0x6b61;
        stop_at = Time.of_sec 8.;
        reads_at = Time.of_sec 10.;
        all_stop = Time.of_sec 19.;
        until = Time.of_sec 36.;
      }
      workload ?trace ?params ~seed ()
end

let scenarios =
  [
    Rsm_sim.scenario ~name ~doc run;
    Rsm_sim.scenario ~name:Disk_faults.name ~doc:Disk_faults.doc Disk_faults.run;
    Rsm_sim.scenario ~name:Lost_dir.name ~doc:Lost_dir.doc Lost_dir.run;
    Rsm_sim.scenario ~name:Ack_race.name ~doc:Ack_race.doc Ack_race.run;
  ]
