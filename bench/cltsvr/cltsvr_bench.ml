(* The servers' view change does not grow with the number of clients:
   3 servers (vsync+Total) with 10 and with 300 clients, one server
   crashing while requests flow, in the simulator (virtual time, so the
   figures do not depend on the machine's load). Beside them, the same
   crash in a group where the clients are members (3 + 10 and 3 + 40):
   what client-server groups avoid. Prints each figure (median over the
   seeds) and the ratios. *)

open Consort
module Sim = Consort_engine.Sim
module Cs = Consort_sim_group.Cltsvr_sim
module V = Consort_sim_group.Vsync_sim

let seeds = ref 5

let () =
  Arg.parse
    [ ("--seeds", Arg.Set_int seeds, "N seeds per configuration (default 5)") ]
    ignore "cltsvr_bench [--seeds N]"

let median l =
  let a = Array.of_list (List.sort compare l) in
  if Array.length a = 0 then nan else a.(Array.length a / 2)

let ms t = Time.to_sec t *. 1000.

let servers_with clients =
  let vc = ref [] and fl = ref [] and cpu = ref [] and bad = ref 0 in
  for seed = 1 to !seeds do
    let t0 = Sys.time () in
    let o =
      Cs.run_world ~seed ~nservers:3 ~nclients:clients ~requests:2 ~loss:0.01 ~crash_server:true
        ~crash_clients:0 ~pause_client:false ()
    in
    cpu := (Sys.time () -. t0) :: !cpu;
    if o.Cs.violations <> [] then incr bad;
    (match o.view_change with Some t -> vc := ms t :: !vc | None -> incr bad);
    match o.flush with Some t -> fl := ms t :: !fl | None -> ()
  done;
  (median !vc, median !fl, median !cpu, !bad)

(* The clients as members: a group of 3 + [clients], one of the first
   three crashing. *)
let members_with clients =
  let vc = ref [] and bad = ref 0 in
  for seed = 1 to !seeds do
    let n = 3 + clients in
    let w = V.make ~seed ~n ~link:(V.lossy 0.01) () in
    let crash_at = Time.of_sec 8. in
    let last = ref None in
    V.set_hooks w
      {
        V.no_hooks with
        viewed =
          (fun _ _ v ->
            let now = Sim.now (V.net w) in
            if now > crash_at && Array.length v.Consort_group.Group.members = n - 1 then
              last := Some now);
      };
    for i = 0 to n - 1 do
      V.at w (Rng.int (V.rng w) 1_000_000_000) (fun () -> V.start w i)
    done;
    V.workload w ~from:(Time.of_sec 4.) ~until:(Time.of_sec 12.) ~count:(2 * clients);
    V.at w crash_at (fun () -> V.crash w 1);
    Sim.run ~until:(Time.of_sec 30.) (V.net w);
    match !last with Some t -> vc := ms (t - crash_at) :: !vc | None -> incr bad
  done;
  (median !vc, !bad)

let () =
  Printf.printf
    "Client-server groups: the servers' view change after a server crash (simulated time, median \
     of %d seeds)\n"
    !seeds;
  let vc10, fl10, cpu10, bad10 = servers_with 10 in
  let vc300, fl300, cpu300, bad300 = servers_with 300 in
  Printf.printf "  %-34s %10s %10s %12s\n" "" "crash->view" "flush" "run CPU s";
  Printf.printf "  %-34s %8.0f ms %7.1f ms %12.2f%s\n" "3 servers, 10 clients" vc10 fl10 cpu10
    (if bad10 > 0 then Printf.sprintf "  (%d seeds failed)" bad10 else "");
  Printf.printf "  %-34s %8.0f ms %7.1f ms %12.2f%s\n" "3 servers, 300 clients" vc300 fl300 cpu300
    (if bad300 > 0 then Printf.sprintf "  (%d seeds failed)" bad300 else "");
  Printf.printf "  ratio 300/10 clients: view change %.2f, flush %.2f\n" (vc300 /. vc10)
    (fl300 /. fl10);
  let m10, b10 = members_with 10 in
  let m40, b40 = members_with 40 in
  Printf.printf "  %-34s %8.0f ms%s\n" "clients as members: 3 + 10" m10
    (if b10 > 0 then Printf.sprintf "  (%d seeds failed)" b10 else "");
  Printf.printf "  %-34s %8.0f ms%s\n" "clients as members: 3 + 40" m40
    (if b40 > 0 then Printf.sprintf "  (%d seeds failed)" b40 else "");
  Printf.printf "  ratio 40/10 members: view change %.2f\n" (m40 /. m10)
