(* A Privacy group of three real processes on loopback, against an
   outsider who captures its traffic: the capture holds neither a payload
   nor the group's name; a member with another key cannot join and
   disturbs nothing; the captured datagrams replayed, and forged ones,
   deliver nothing and change no view. The members' counters say what
   they dropped and why. *)

open Capture
module Vsync = Consort_spec.Vsync
module Seal = Consort_seal.Seal

let outsider () =
  let dir = temp_dir () in
  let key = Filename.concat dir "group.key" and other = Filename.concat dir "other.key" in
  (match Seal.write_key key (Seal.generate ()) with Ok () -> () | Error e -> Alcotest.fail e);
  (match Seal.write_key other (Seal.generate ()) with Ok () -> () | Error e -> Alcotest.fail e);
  let ms = P.create ~dir 4 in
  let group = List.filteri (fun i _ -> i < 3) ms and intruder = List.nth ms 3 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let out m = Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx) in
  let start ?(key = key) m =
    P.start ~exe:(exe ()) ~props:"vsync,Privacy" ~extra:[ "--key"; key ] ~group:"privacy-group"
      ~peers ~output:(out m) m
  in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      List.iter (fun m -> start m) group;
      expect "the three form one group" (P.wait_until ~timeout:30. (fun () -> P.same_view group));
      let vid =
        match P.current_view (List.hd group) with Some (v, _) -> v | None -> assert false
      in
      let sent = ref 0 in
      let cast_round () =
        List.iter (fun m -> P.cast m (Printf.sprintf "PLAINTEXT-MARKER-%d-%d" m.P.idx !sent)) group;
        incr sent
      in
      let captured =
        capture ~dir group (fun () ->
            for _ = 1 to 20 do
              cast_round ();
              Unix.sleepf 0.02
            done;
            expect "the casts are delivered"
              (P.wait_until ~timeout:10. (fun () ->
                   List.for_all (fun m -> P.deliveries m >= 3 * !sent) group)))
      in
      let payloads = List.map snd captured in
      if List.length payloads < 60 then
        Alcotest.failf "only %d datagrams captured (tcpdump: %s)" (List.length payloads)
          (String.escaped (read_file (Filename.concat dir "tcpdump.err")));
      List.iter
        (fun d ->
          if contains d "PLAINTEXT-MARKER" then Alcotest.fail "a payload is in clear on the wire";
          if contains d "privacy-group" then
            Alcotest.fail "the group's name is in clear on the wire";
          if String.length d = 0 || Char.code d.[0] <> 0xC5 then
            Alcotest.fail "a datagram is not sealed")
        payloads;
      (* A member with another key. *)
      start ~key:other intruder;
      Unix.sleepf 4.;
      (match P.current_view intruder with
      | Some (_, [ _ ]) -> ()
      | Some (_, l) -> Alcotest.failf "the intruder is in a view of %d" (List.length l)
      | None -> Alcotest.fail "the intruder logged no view");
      (* The capture replayed, and forgeries. *)
      let targets = List.map (fun m -> port_of m.P.addr) group in
      send_all targets payloads;
      let forged =
        List.map
          (fun d ->
            let b = Bytes.of_string d in
            let i = 34 + ((Bytes.length b - 34) / 2) in
            Bytes.set b i (Char.chr (Char.code (Bytes.get b i) lxor 1));
            Bytes.to_string b)
          payloads
      in
      send_all targets forged;
      cast_round ();
      expect "casts still delivered"
        (P.wait_until ~timeout:10. (fun () ->
             List.for_all (fun m -> P.deliveries m >= 3 * !sent) group));
      Unix.sleepf 1.;
      List.iter
        (fun m ->
          match P.current_view m with
          | Some (v, members) ->
              Alcotest.(check string) "no view change" vid v;
              Alcotest.(check int) "three members" 3 (List.length members)
          | None -> Alcotest.fail "no view")
        group;
      P.kill intruder;
      expect "everyone leaves cleanly" (P.leave_all group ~timeout:20.);
      List.iter
        (fun m -> Alcotest.(check int) "each cast delivered once" (3 * !sent) (P.deliveries m))
        group;
      (match Vsync.check_files ~quiescent:false (P.all_logs group) with
      | Ok _ -> ()
      | Error errs ->
          Alcotest.failf "the logs break the specification:\n%s"
            (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
      let total k = List.fold_left (fun acc m -> acc + get (counters (out m)) k) 0 group in
      Printf.printf "replayed=%d bad_tag=%d stale=%d opened=%d\n" (total "seal.replayed")
        (total "seal.bad_tag") (total "seal.stale") (total "seal.opened");
      Alcotest.(check bool) "replays counted" true (total "seal.replayed" >= List.length payloads);
      Alcotest.(check bool)
        "forgeries and the intruder's datagrams counted" true
        (total "seal.bad_tag" >= List.length payloads))

let () =
  Alcotest.run "privacy"
    [ ("group", [ Alcotest.test_case "an outsider with a capture" `Slow outsider ]) ]
