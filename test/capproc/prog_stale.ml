(* A program that outlives its start, for the circuits an agent keeps across starts: it prints
   its standard output circuit's port, and with a delay leaves behind a child of its own session
   (not killed with its process group) and exits 0. The child closes its standard streams, and
   [delay] seconds later writes "STALE" into that circuit through the RPC, with the capability the
   program was given, then writes what it was answered ([written] or [refused: WHY]) into the file
   [result]. [prog_stale.bc - -]: the port only. *)
module R = Consort_cap.Rpc_udp
module E = Consort_capvc.Vc_end

let stale_write text locate =
  match Consort_cap.Cap.of_string text with
  | Error _ -> "bad capability"
  | Ok cap -> (
      let loop = Consort_engine.Loop.create () in
      match R.open_node ?locate loop with
      | Error e -> "no node: " ^ e
      | Ok node -> (
          let e = E.create (fun ~idempotent h d k -> R.trans node ~idempotent h d k) cap in
          let r = ref None in
          E.write e "STALE\n" (fun x -> r := Some x);
          Consort_engine.Loop.run loop ~timeout:(Consort.Time.of_sec 30.) ~until:(fun () ->
              !r <> None);
          match !r with
          | None -> "no answer"
          | Some (Ok ()) -> "written"
          | Some (Error why) -> "refused: " ^ why))

let () =
  match Sys.argv with
  | [| _; delay; result |] -> (
      match Consort_capenv.find "stdout" with
      | None ->
          prerr_endline "no stdout capability";
          exit 3
      | Some text -> (
          (match Consort_cap.Cap.of_string text with
          | Ok c -> Fmt.pr "port: %a@." Consort_cap.Port.pp c.Consort_cap.Cap.port
          | Error _ -> print_endline "port: ?");
          if delay = "-" then exit 0;
          let locate = Consort_capenv.locate () in
          (* The program exits once its child is out of its process group (killed with it). *)
          let r, w = Unix.pipe () in
          match Unix.fork () with
          | 0 ->
              Unix.close r;
              ignore (Unix.setsid ());
              let null = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
              List.iter (Unix.dup2 null) [ Unix.stdin; Unix.stdout; Unix.stderr ];
              ignore (Unix.write_substring w "s" 0 1);
              Unix.close w;
              Unix.sleepf (float_of_string delay);
              let outcome = stale_write text locate in
              let tmp = result ^ ".tmp" in
              let oc = open_out tmp in
              output_string oc outcome;
              close_out oc;
              Sys.rename tmp result;
              exit 0
          | _ ->
              Unix.close w;
              ignore (Unix.read r (Bytes.create 1) 0 1);
              exit 0))
  | _ ->
      prerr_endline "usage: prog_stale.bc DELAY RESULT";
      exit 2
