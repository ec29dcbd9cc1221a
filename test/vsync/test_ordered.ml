(* Real member processes with ordered delivery: three [consort member
   --props vsync,Total] processes on loopback (sequencer, then token), each
   casting while the others do; one is killed with SIGKILL midway and the
   others go on. Each member writes only its own log; the logs together are
   checked with virtual synchrony and total order (what [consort check-logs
   --total] does). The same with [Causal] and [Agree]. *)

module P = Consort_member.Procs
module Vsync = Consort_spec.Vsync
module Order = Consort_spec.Order

let exe () =
  let dir = Filename.dirname Sys.executable_name in
  let candidates = [ Filename.concat dir "../../bin/main.exe"; "_build/default/bin/main.exe" ] in
  match List.find_opt Sys.file_exists candidates with
  | Some e -> e
  | None -> Alcotest.fail "consort binary not found"

let params = "suspect.timeout=1500ms,group.merge_timeout=1s"

let temp_dir tag =
  let d =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-ordered-%s-%d" tag (Unix.getpid ()))
  in
  if not (Sys.file_exists d) then Unix.mkdir d 0o755;
  d

let expect what ok = if not ok then Alcotest.failf "timed out waiting until %s" what

let casts ms k tag =
  List.iter
    (fun m ->
      for i = 1 to k do
        P.cast m (Printf.sprintf "%s-%d-%d" tag m.P.idx i)
      done)
    ms

let check ms checks =
  let files = P.all_logs ms in
  (match Vsync.check_files ~quiescent:false files with
  | Ok _ -> ()
  | Error errs ->
      Alcotest.failf "the logs break virtual synchrony:\n%s"
        (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
  let logs =
    List.filter_map
      (fun f ->
        match P.events f with e :: _ as evs -> Some (Consort_spec.Log.me e, evs) | [] -> None)
      files
  in
  List.iter
    (fun (name, f) ->
      match f logs with
      | Ok () -> ()
      | Error vs ->
          Alcotest.failf "the logs break %s:\n%s" name
            (String.concat "\n" (List.map (Fmt.str "%a" Order.pp_violation) vs)))
    checks;
  (* Every survivor delivered the same sequence of casts in its last
     shared view: the check has something to compare. *)
  List.length logs

let run ~tag ~props ~extra_params checks () =
  let dir = temp_dir tag in
  let ms = P.create ~dir 3 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let params = if extra_params = "" then params else params ^ "," ^ extra_params in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      List.iter (fun m -> P.start ~exe:(exe ()) ~params ~props ~group:tag ~peers m) ms;
      expect "the three form one group" (P.wait_until ~timeout:20. (fun () -> P.same_view ms));
      casts ms 30 "a";
      expect "every cast is delivered"
        (P.wait_until ~timeout:15. (fun () -> List.for_all (fun m -> P.deliveries m >= 90) ms));
      casts ms 20 "b";
      let victim = List.nth ms 2 and rest = List.filteri (fun i _ -> i < 2) ms in
      P.kill victim;
      expect "the two others install a view without the killed member"
        (P.wait_until ~timeout:15. (fun () -> P.same_view rest));
      casts rest 20 "c";
      Unix.sleepf 1.;
      expect "everyone leaves cleanly" (P.leave_all rest ~timeout:15.);
      let n = check ms checks in
      Alcotest.(check int) "one log per member" 3 n;
      (* The same check from the command line. *)
      let flags =
        List.map
          (fun (name, _) ->
            match name with
            | "total order" -> "--total"
            | "causal order" -> "--causal"
            | _ -> "--safe")
          checks
      in
      let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
      let pid =
        Unix.create_process (exe ())
          (Array.of_list (("consort" :: "check-logs" :: flags) @ P.all_logs ms))
          null null null
      in
      Unix.close null;
      match Unix.waitpid [] pid with
      | _, Unix.WEXITED 0 -> ()
      | _, (Unix.WEXITED c | Unix.WSIGNALED c | Unix.WSTOPPED c) ->
          Alcotest.failf "consort check-logs %s: exit %d" (String.concat " " flags) c)

let () =
  Alcotest.run "ordered"
    [
      ( "processes",
        [
          Alcotest.test_case "Total, sequencer: kill one" `Quick
            (run ~tag:"seq" ~props:"vsync,Total" ~extra_params:""
               [ ("total order", Order.check_total) ]);
          Alcotest.test_case "Total, token: kill one" `Quick
            (run ~tag:"tok" ~props:"vsync,Total" ~extra_params:"total.protocol=token"
               [ ("total order", Order.check_total) ]);
          Alcotest.test_case "Causal and Agree: kill one" `Quick
            (run ~tag:"ca" ~props:"vsync,Causal,Safe" ~extra_params:""
               [ ("causal order", Order.check_causal); ("safe delivery", Order.check_safe) ]);
        ] );
    ]
