open Consort
module Store = Consort_kv.Store.Make (Dir.Rsm)
module Rsm_sim = Consort_sim_kv.Rsm_sim
module S = Rsm_sim.Make (Dir.Rsm) (Store)
module L = Consort_spec.Linearizable
module Cap = Consort_cap.Cap

let name = "dir-replicated"

let doc =
  "3 replicas of the directory server; clients look up, install (one row or two at once) and \
   delete rows while replicas crash (some mid-write), restart from disk, are partitioned and \
   healed, then all restart from disk; the history of each row is linearizable and the replicas \
   agree"

type outcome = Rsm_sim.outcome

let config =
  {
    Rsm_sim.tag = "dir";
    salt = 0x6469;
    stop_at = Time.of_sec 8.;
    faults_ms = 5_500;
    down_ms = 3000;
    heal_ms = 4000;
    reads_at = Time.of_sec 11.;
    all_stop = Time.of_sec 20.;
    until = Time.of_sec 33.;
    disk_faults = false;
    lost_dir = false;
  }

(* Lookups, installs of one row or two at once, chmods and deletes on the rows of the root
   directory; a row's value is the object number of the capability it holds. *)
let workload ~seed rng =
  let g = Consort_crypto.Crypto.deterministic (Printf.sprintf "dir-replicated %d" seed) in
  let port = Consort_cap.Port.Key.port (Consort_cap.Port.Key.generate ~g ()) in
  let limits =
    Dir.default_limits ~port ~server_secret:(Cap.Secret.generate ~g ())
      ~root_secret:(Cap.Secret.generate ~g ())
  in
  let root = Cap.owner port ~obj:Dir.root_obj limits.root_secret in
  let fport = Consort_cap.Port.Key.port (Consort_cap.Port.Key.generate ~g ()) in
  let fsecret = Cap.Secret.generate ~g () in
  let value_cap v = Cap.owner fport ~obj:v fsecret in
  let keys = Rsm_sim.keys in
  let made = ref 0 in
  let read k = (Dir.Lookup { dir = root; name = k }, [ (k, L.Get) ]) in
  let next c =
    incr made;
    let k = keys.(Random.State.int rng (Array.length keys)) in
    let v = (c * 100_000) + !made in
    let row name = { Dir.name; masks = [ Consort_cap.Rights.all ]; caps = [ value_cap v ] } in
    match Random.State.int rng 10 with
    | 0 | 1 | 2 | 3 -> read k
    | 4 | 5 | 6 ->
        ( Dir.Install { dir = root; expect = None; rows = [ row k ] },
          [ (k, L.Put (string_of_int v)) ] )
    | 7 ->
        let k2 = keys.(Array.length keys - 1 - Random.State.int rng (Array.length keys - 1)) in
        let k2 = if k2 = k then keys.(0) else k2 in
        let ks = if k2 = k then [ k ] else [ k; k2 ] in
        ( Dir.Install { dir = root; expect = None; rows = List.map row ks },
          List.map (fun k -> (k, L.Put (string_of_int v))) ks )
    | 8 when Random.State.bool rng ->
        (* No effect on what a lookup through the root's owner
           capability names: not in the checked history, but the
           replicas must still agree on the masks and sequence numbers. *)
        ( Dir.Chmod
            {
              dir = root;
              name = k;
              masks = [ Consort_cap.Rights.of_int_exn (Random.State.int rng 256) ];
            },
          [] )
    | _ -> (Dir.Delete { dir = root; name = k }, [ (k, L.Del) ])
  in
  let answer _ (key, (sop : L.op)) (r : Dir.response) =
    match (sop, r) with
    | L.Get, Dir.Caps [ Dir.Narrowed c ] -> Ok (L.Value (string_of_int c.obj))
    | (L.Get | L.Del), Dir.Error (Dir.Not_found _) -> Ok L.Not_found
    | (L.Put _ | L.Del), Dir.Done _ -> Ok L.Ok
    | _ -> Error (Fmt.str "%a on %s answered %a" L.pp_op sop key Dir.pp_response r)
  in
  let label _ spec =
    String.concat "," (List.map (fun (k, o) -> Fmt.str "%s %a" k L.pp_op o) spec)
  in
  { S.limits = Some limits; next; label; answer; read }

let run ?trace ?params ~seed () = S.run config workload ?trace ?params ~seed ()

module Disk_faults = struct
  let name = "dir-disk-faults"

  let doc =
    "dir-replicated with storage faults: disks fill, fail writes and fsyncs for a while; a replica \
     stops at the first fault and is restarted until its disk is repaired; every stop loses what \
     was not fsynced; no acknowledged install is lost, each row's history is linearizable and the \
     replicas agree"

  let run ?trace ?params ~seed () =
    S.run
      { config with tag = "dirdisk"; salt = 0x6464; disk_faults = true }
      workload ?trace ?params ~seed ()
end

module Lost_dir = struct
  let name = "dir-lost-dir"

  let doc =
    "dir-replicated with data directories that have an identity: one replica goes down, then a \
     second, and the third is restarted on an empty directory (--join) or on a directory of \
     another cluster of the same directory service beside the first; the second comes back later; \
     no acknowledged install is lost, each row's history is linearizable and the replicas agree"

  let run ?trace ?params ~seed () =
    S.run
      { config with tag = "dirlost"; salt = 0x646c; lost_dir = true }
      workload ?trace ?params ~seed ()
end

let scenarios =
  [
    Rsm_sim.scenario ~name ~doc run;
    Rsm_sim.scenario ~name:Disk_faults.name ~doc:Disk_faults.doc Disk_faults.run;
    Rsm_sim.scenario ~name:Lost_dir.name ~doc:Lost_dir.doc Lost_dir.run;
  ]
