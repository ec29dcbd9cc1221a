(* Issue 29, defect 1: an outsider without the key captures, on loopback
   with tcpdump, the datagrams of a send from A to B in a sealed group of
   three real processes, and replays them unchanged to C; then A sends to
   C. C must deliver only its own message (a send names its destination,
   and under the seal that is authenticated), the logs must meet the
   virtual synchrony specification, and C's counters must show the replays
   dropped as misdirected. *)

open Capture
module Vsync = Consort_spec.Vsync
module Seal = Consort_seal.Seal

(* Runs the consort binary with [args]; its exit status and output. *)
let run args =
  let out = Filename.temp_file "consort-redirect" ".out" in
  let fd = Unix.openfile out [ Unix.O_WRONLY; Unix.O_TRUNC ] 0o600 in
  let pid = Unix.create_process (exe ()) (Array.of_list (exe () :: args)) Unix.stdin fd fd in
  Unix.close fd;
  let _, st = Unix.waitpid [] pid in
  let text = read_file out in
  Sys.remove out;
  ((match st with Unix.WEXITED c -> c | _ -> 255), text)

let redirect props () =
  let dir = temp_dir () in
  let key = Filename.concat dir "group.key" in
  (match Seal.write_key key (Seal.generate ()) with Ok () -> () | Error e -> Alcotest.fail e);
  let ms = P.create ~dir 3 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let group = "redirect-group" in
  let out m = Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx) in
  let sock m = Filename.concat dir (Printf.sprintf "control-%d.sock" m.P.idx) in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      List.iter
        (fun m ->
          P.start ~exe:(exe ()) ~props
            ~extra:[ "--key"; key; "--control"; sock m ]
            ~group ~peers ~output:(out m) m)
        ms;
      expect "the three form one group" (P.wait_until ~timeout:30. (fun () -> P.same_view ms));
      let a, b, c = match ms with [ a; b; c ] -> (a, b, c) | _ -> assert false in
      let members = match P.current_view a with Some (_, l) -> l | None -> [] in
      (* A member's id begins with its address. *)
      let id m =
        match
          List.find_opt
            (fun e ->
              String.length e > String.length m.P.addr
              && String.sub e 0 (String.length m.P.addr + 1) = m.P.addr ^ "#")
            members
        with
        | Some e -> e
        | None -> Alcotest.failf "no member id for %s in [%s]" m.P.addr (String.concat ", " members)
      in
      let send dst text =
        match run [ "send"; "--control"; sock a; "--group"; group; id dst; text ] with
        | 0, _ -> ()
        | code, out -> Alcotest.failf "consort send exited %d: %s" code out
      in
      let said m text = contains (read_file (out m)) text in
      let captured =
        capture ~dir [ b ] (fun () ->
            send b "FOR-B-ONLY";
            expect "B delivers its message"
              (P.wait_until ~timeout:10. (fun () -> said b "FOR-B-ONLY")))
      in
      let to_b = List.map snd captured in
      if to_b = [] then Alcotest.fail "nothing captured on its way to B";
      send_all [ port_of c.P.addr ] to_b;
      Unix.sleepf 0.5;
      send c "FOR-C";
      expect "C delivers its own message" (P.wait_until ~timeout:10. (fun () -> said c "FOR-C"));
      Unix.sleepf 0.5;
      Alcotest.(check bool) "C never delivers B's message" false (said c "FOR-B-ONLY");
      Alcotest.(check bool) "A never delivers either" false (said a "FOR-B-ONLY" || said a "FOR-C");
      (match run [ "status"; "--control"; sock c ] with
      | 0, text ->
          Alcotest.(check bool)
            ("consort status shows the seal's freshness: " ^ text)
            true
            (contains text "clocks accepted within 60s (seal.freshness)")
      | code, text -> Alcotest.failf "consort status exited %d: %s" code text);
      expect "everyone leaves cleanly" (P.leave_all ms ~timeout:20.);
      (match Vsync.check_files ~quiescent:false (P.all_logs ms) with
      | Ok _ -> ()
      | Error errs ->
          Alcotest.failf "the logs break the specification:\n%s"
            (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
      let cs = counters (out c) in
      Printf.printf "%s: %d datagrams replayed to C; C: bottom.misdirected=%d seal.replayed=%d\n"
        props (List.length to_b) (get cs "bottom.misdirected") (get cs "seal.replayed");
      Alcotest.(check bool)
        "the replayed send counted as misdirected" true
        (get cs "bottom.misdirected" >= 1))

let () =
  Alcotest.run "redirect"
    [
      ( "replayed to another member",
        [
          Alcotest.test_case "vsync,Auth" `Slow (redirect "vsync,Auth");
          Alcotest.test_case "vsync,Privacy" `Slow (redirect "vsync,Privacy");
        ] );
    ]
