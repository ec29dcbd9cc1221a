(* A program that uses its capability environment: std_info on the
   capability named "files", through the RPC, and prints the answer. *)
let () =
  match Consort_capenv.find "files" with
  | None ->
      prerr_endline "no files capability";
      exit 3
  | Some text -> (
      match Consort_cap.Cap.of_string text with
      | Error _ ->
          prerr_endline "bad capability";
          exit 4
      | Ok cap -> (
          let loop = Consort_engine.Loop.create () in
          match Consort_cap.Rpc_udp.open_node ?locate:(Consort_capenv.locate ()) loop with
          | Error e ->
              prerr_endline e;
              exit 5
          | Ok node -> (
              match Consort_cap.Rpc_udp.Sync.std_info node cap with
              | Ok s ->
                  print_endline ("info: " ^ s);
                  exit 0
              | Error e ->
                  Fmt.epr "%a@." Consort_cap.Rpc.pp_call_error e;
                  exit 6)))
