open Cmdliner

let json = Arg.(value & flag & info [ "json" ] ~doc:"Also print the figures as one JSON line.")

let params =
  Arg.(
    value & opt string ""
    & info [ "params" ] ~docv:"NAME=VALUE,..."
        ~doc:"Override tunables of the group stack (see $(b,consort params)).")

let exe () = Consort_bench.Exe.consort ()

let report name pp to_json json = function
  | Ok r ->
      Fmt.pr "%a" pp r;
      if json then print_endline (to_json r);
      0
  | Error e ->
      Fmt.epr "consort bench %s: %s@." name e;
      1

(* Bad tunables are refused before anything starts (exit 2). *)
let checked name params k =
  match Consort.Params.of_string params with
  | Error e -> Consort_cli.fail ("bench " ^ name) "--params: %a" Consort.Params.pp_error e
  | Ok _ -> k ()

let placement () = if Proc.can_pin () then "" else " (taskset not found: processes unpinned)"

let join sizes reps params seal json =
  checked "join" params @@ fun () ->
  Fmt.pr
    "Join: member processes started at once on 127.0.0.1, each told every address; from process \
     creation@.";
  Fmt.pr
    "to its first view (start: the process alone, the baseline) and to the view of all (join); \
     unpinned, %d CPUs@."
    (Proc.online_cpus ());
  Fmt.pr "(Ensemble 2.01 on this kind of machine: join 8 to 13 ms)@.";
  if seal then
    Fmt.pr
      "(Privacy: sealed under the group secret alone, seal.rekey=false; Privacy+Rekey: also a key \
       per view)@.";
  let code =
    report "join" Join.pp_table Join.to_json json
      (Join.run ~exe:(exe ()) ~sizes ~reps ~params ~seal ())
  in
  if seal then
    List.iter
      (fun n ->
        let draw, unwrap = Join.rekey_cost n in
        Fmt.pr
          "rekey of a view of %d (this process): the maker draws and wraps %d keys in %.0f us; a \
           member unwraps its own in %.0f us@."
          n (n - 1) draw unwrap)
      sizes;
  code

let join_seal =
  Arg.(
    value & flag
    & info [ "seal" ]
        ~doc:
          "Also each size sealed with Privacy, without and with per-view keys (Rekey: a key drawn \
           and wrapped for each member at every view change), in the same run, beside it in clear.")

let join_cmd =
  let sizes =
    Arg.(
      value
      & opt (list int) [ 2; 3; 4; 5; 6; 7; 8 ]
      & info [ "sizes" ] ~docv:"N,..." ~doc:"Group sizes.")
  in
  let reps =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "reps" ] ~docv:"N" ~doc:"Groups started per size.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench join" "join"
       ~doc:"Join latency of groups of 2 to 8 member processes, beside the cost of starting one.")
    Term.(const join $ sizes $ reps $ params $ join_seal $ json)

let failover size reps params json =
  checked "failover" params @@ fun () ->
  Fmt.pr
    "Failure detection: a group of %d member processes on 127.0.0.1 (unpinned), one killed with \
     SIGKILL;@."
    size;
  Fmt.pr
    "time from the kill to each survivor's view without it, beside the configured suspect.timeout@.";
  Fmt.pr "(Ensemble 2.01: failure detection 30 s with its defaults)@.";
  report "failover" Failover.pp_table Failover.to_json json
    (Failover.run ~exe:(exe ()) ~size ~reps ~params ())

let failover_cmd =
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "size" ] ~docv:"N" ~doc:"Members in the group.")
  in
  let reps =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "reps" ] ~docv:"N" ~doc:"Kills, each in a fresh group.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench failover" "failover"
       ~doc:"Failure detection plus view change after SIGKILL, beside the suspicion timeout.")
    Term.(const failover $ size $ reps $ params $ json)

let seal_flag =
  Arg.(
    value & flag
    & info [ "seal" ]
        ~doc:
          "Also the vsync stack sealed with Auth and with Privacy (Consort_seal; with per-view \
           keys, Rekey, as by default), and Privacy without Rekey, in the same run, beside it in \
           clear.")

let rtt count warmup rounds params total seal json =
  checked "rtt" params @@ fun () ->
  Fmt.pr
    "Round trip of 16 bytes between 2 processes on 127.0.0.1, ping-pong: %d round trips in %d \
     rounds%s@."
    count rounds (placement ());
  Fmt.pr
    "(Ensemble 2.01 on this kind of machine, processes on different CPUs: 80 us, raw UDP 66 us)@.";
  report "rtt" Rtt.pp_table Rtt.to_json json
    (Rtt.run ~exe:(exe ()) ~count ~warmup ~rounds ~params ~total ~seal ())

let rtt_cmd =
  let count =
    Arg.(
      value & opt Consort_cli.positive_int 5000
      & info [ "count" ] ~docv:"N" ~doc:"Round trips measured.")
  in
  let warmup =
    Arg.(
      value & opt Consort_cli.natural 500
      & info [ "warmup" ] ~docv:"N" ~doc:"Round trips before measuring, in each round.")
  in
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "rounds" ] ~docv:"N"
          ~doc:"Rounds through every configuration, each with fresh processes.")
  in
  let total =
    Arg.(
      value & flag
      & info [ "total" ]
          ~doc:"Also round trips of casts with Total, by the sequencer and by the token.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench rtt" "rtt"
       ~doc:
         "Round-trip latency of 16-byte casts between 2 members, beside UDP, on one CPU and on two.")
    Term.(const rtt $ count $ warmup $ rounds $ params $ total $ seal_flag $ json)

let throughput count size senders params deadline reps total seal unbundled members not_sequencer
    json =
  checked "throughput" params @@ fun () ->
  Fmt.pr
    "Multicast throughput: %d messages of %d bytes per sender, %d processes on 127.0.0.1 \
     (unpinned), %d runs each@."
    count size members reps;
  Fmt.pr
    "(Ensemble 2.01 on this kind of machine: about 1,900 casts/s of 1 KB with its default flow \
     control)@.";
  let stacks =
    if total then
      Some
        [
          ("vsync FIFO", "vsync", "");
          ("Total seq", "vsync,Total", "total.protocol=sequencer");
          ("Total token", "vsync,Total", "total.protocol=token");
        ]
    else if seal then
      Some
        [
          ("vsync", "vsync", "");
          ("vsync Auth", "vsync,Auth", "");
          ("vsync Privacy", "vsync,Privacy", "");
          ("Privacy no Rekey", "vsync,Privacy", "seal.rekey=false");
        ]
    else if unbundled then
      Some [ ("group cast", "vsync", ""); ("unbundled", "vsync", "group.bundle=0") ]
    else None
  in
  report "throughput" Throughput.pp_table Throughput.to_json json
    (Throughput.run ~exe:(exe ()) ~count ~size ~senders ~params ?stacks ~members ~not_sequencer
       ~deadline ~reps ())

let throughput_cmd =
  let count =
    Arg.(
      value
      & opt Consort_cli.positive_int 20000
      & info [ "count" ] ~docv:"N" ~doc:"Messages per sender.")
  in
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 1024
      & info [ "size" ] ~docv:"BYTES" ~doc:"Bytes per message.")
  in
  let senders =
    Arg.(
      value
      & opt (list int) [ 1; 3 ]
      & info [ "senders" ] ~docv:"N,..." ~doc:"Group runs: how many members cast.")
  in
  let deadline =
    Arg.(
      value
      & opt Consort_cli.positive_float 30.
      & info [ "deadline" ] ~docv:"S" ~doc:"Seconds before a run is given up.")
  in
  let reps =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "reps" ] ~docv:"N" ~doc:"Runs of each configuration; the median is shown.")
  in
  let members =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "members" ] ~docv:"N" ~doc:"Member processes (2 to 32).")
  in
  let total =
    Arg.(
      value & flag
      & info [ "total" ]
          ~doc:
            "Group rows for the vsync stack (FIFO), and for Total with the sequencer and with the \
             token, in the same run.")
  in
  let not_sequencer =
    Arg.(
      value & flag
      & info [ "sender-not-sequencer" ]
          ~doc:
            "Group runs: the members that cast are those of the highest ranks of the view, so that \
             rank 0 (Total's sequencer) casts only when every member does (with $(b,--senders) \
             below $(b,--members), never); the rows say which process was rank 0 and which cast.")
  in
  let unbundled =
    Arg.(
      value & flag
      & info [ "unbundled" ]
          ~doc:
            "Also the same group with bundling off (group.bundle=0), in the same run, and the \
             ratio.")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench throughput" "throughput"
       ~doc:"Multicast throughput of 1 KB casts among member processes (3 by default), beside UDP.")
    Term.(
      const throughput $ count $ size $ senders $ params $ deadline $ reps $ total $ seal_flag
      $ unbundled $ members $ not_sequencer $ json)

let peer kind index addrs count warmup size senders not_sequencer deadline params props =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Warning);
  match
    ( Peer.kind_of_string kind,
      Result.map_error (Fmt.str "%a" Consort.Params.pp_error) (Consort.Params.of_string params) )
  with
  | Error e, _ | _, Error e ->
      Fmt.epr "consort bench peer: %s@." e;
      2
  | Ok kind, Ok params -> (
      match
        Peer.run
          {
            Peer.kind;
            index;
            addrs;
            count;
            warmup;
            size;
            senders;
            not_sequencer;
            deadline;
            params;
            props;
          }
      with
      | Ok line ->
          print_endline line;
          0
      | Error e ->
          Fmt.epr "consort bench peer: %s@." e;
          1)

let peer_cmd =
  let kind =
    Arg.(
      required
      & opt (some string) None
      & info [ "kind" ] ~docv:"K" ~doc:"group-rtt, engine-rtt, raw-rtt, group-tput or raw-tput.")
  in
  let index =
    Arg.(
      required
      & opt (some Consort_cli.natural) None
      & info [ "index" ] ~docv:"I" ~doc:"This process's place in $(b,--addrs).")
  in
  let addrs =
    Arg.(
      required
      & opt (some (list string)) None
      & info [ "addrs" ] ~docv:"ADDR,..." ~doc:"Every process's IP:PORT.")
  in
  let count =
    Arg.(
      value & opt Consort_cli.positive_int 1000
      & info [ "count" ] ~docv:"N" ~doc:"Round trips, or messages per sender.")
  in
  let warmup =
    Arg.(
      value & opt Consort_cli.natural 100
      & info [ "warmup" ] ~docv:"N" ~doc:"Round trips before measuring.")
  in
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 1024
      & info [ "size" ] ~docv:"BYTES" ~doc:"Bytes per message.")
  in
  let senders =
    Arg.(
      value & opt Consort_cli.positive_int 1
      & info [ "senders" ] ~docv:"N" ~doc:"Members that cast.")
  in
  let not_sequencer =
    Arg.(
      value & flag
      & info [ "not-sequencer" ]
          ~doc:
            "The members that cast are those of the highest ranks of the view (rank 0, Total's \
             sequencer, casts only when every member does), not the first of $(b,--addrs).")
  in
  let deadline =
    Arg.(
      value
      & opt Consort_cli.positive_float 30.
      & info [ "deadline" ] ~docv:"S" ~doc:"Give up after this many seconds.")
  in
  let props =
    Arg.(
      value & opt string "vsync"
      & info [ "props" ] ~docv:"P" ~doc:"The group's properties (group-tput).")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench peer" ~hidden:true "peer"
       ~doc:"One process of the rtt and throughput benchmarks (started by them).")
    Term.(
      const peer $ kind $ index $ addrs $ count $ warmup $ size $ senders $ not_sequencer $ deadline
      $ params $ props)

let scale sizes scale_sizes params json =
  checked "scale" params @@ fun () ->
  let params = Result.get_ok (Consort.Params.of_string params) in
  Fmt.pr
    "Scale of the vsync stack in the simulator (1 ms links, no loss): N members start at once and \
     merge;@.";
  Fmt.pr
    "5 s idle, 5 s with each member (at most 64) casting 100 bytes once a second, then one member \
     crashes@.";
  let rows = Scale_sim.run ~sizes ~scale_sizes ~params () in
  Fmt.pr "%a" Scale_sim.pp_table rows;
  if json then print_endline (Scale_sim.to_json rows);
  0

let scale_cmd =
  let sizes =
    Arg.(
      value
      & opt (list Consort_cli.positive_int) [ 16; 32; 64 ]
      & info [ "sizes" ] ~docv:"N,..." ~doc:"Group sizes for the vsync stack, and batched.")
  in
  let scale_sizes =
    Arg.(
      value
      & opt (list Consort_cli.positive_int) [ 64; 256; 1024 ]
      & info [ "scale-sizes" ] ~docv:"N,..."
          ~doc:"Group sizes for the Scale stack (vsync+Scale: Ringfd and mnak_tree).")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench scale" "scale"
       ~doc:
         "How the cost per member of the vsync stack grows with the group, in the simulator \
          (virtual and CPU time).")
    Term.(const scale $ sizes $ scale_sizes $ params $ json)

let membership binaries rounds size sizes params json save =
  checked "membership" params @@ fun () ->
  let this = { Membership.label = "this"; exe = exe () } in
  let parse s =
    match String.index_opt s '=' with
    | Some i when i > 0 ->
        Ok
          {
            Membership.label = String.sub s 0 i;
            exe = String.sub s (i + 1) (String.length s - i - 1);
          }
    | _ -> Error (Printf.sprintf "--consort %s: not LABEL=PATH" s)
  in
  let usable (b : Membership.binary) =
    if b.exe = "" then Error (Printf.sprintf "--consort %s: no path" b.label)
    else
      match Unix.access b.exe [ Unix.X_OK ] with
      | () when Sys.is_directory b.exe -> Error (Printf.sprintf "--consort %s: a directory" b.exe)
      | () -> (
          (* A consort executable answers "member --version" with one line and 0. *)
          let said =
            match
              let r, w = Unix.pipe ~cloexec:true () in
              let null = Unix.openfile "/dev/null" [ Unix.O_RDWR; Unix.O_CLOEXEC ] 0 in
              let pid =
                Fun.protect
                  ~finally:(fun () -> List.iter Unix.close [ w; null ])
                  (fun () ->
                    Unix.create_process b.exe [| b.exe; "member"; "--version" |] null w null)
              in
              let ic = Unix.in_channel_of_descr r in
              let line = try Some (input_line ic) with End_of_file | Sys_error _ -> None in
              close_in_noerr ic;
              (pid, line)
            with
            | pid, line -> (
                match (snd (Unix.waitpid [] pid), line) with
                | Unix.WEXITED 0, Some l when l <> "" -> Ok ()
                | _ -> Error "not a consort executable (no version from member --version)")
            | exception Unix.Unix_error (e, _, _) -> Error (Unix.error_message e)
          in
          match said with
          | Ok () -> Ok b
          | Error m -> Error (Printf.sprintf "--consort %s: %s" b.exe m))
      | exception Unix.Unix_error (e, _, _) ->
          Error (Printf.sprintf "--consort %s: %s" b.exe (Unix.error_message e))
  in
  let all f l =
    List.fold_left
      (fun acc x -> Result.bind acc (fun l -> Result.map (fun b -> l @ [ b ]) (f x)))
      (Ok []) l
  in
  let labels l = List.map (fun (b : Membership.binary) -> b.label) l in
  let bins =
    Result.bind (all parse binaries) (fun l ->
        if List.length (List.sort_uniq compare (labels l)) <> List.length l then
          Error "--consort: a label given twice"
        else all usable l)
  in
  match (bins, Option.bind save Consort_cli.unwritable_dir) with
  | Error e, _ -> Consort_cli.fail "bench membership" "%s" e
  | _, Some m -> Consort_cli.fail "bench membership" "--save %s: %s" (Option.get save) m
  | Ok bins, None -> (
      let bins = if bins = [] then [ this ] else bins in
      Fmt.pr
        "Membership: consort member processes on 127.0.0.1 (unpinned, %d CPUs online), %d rounds, \
         each through %s in turn@."
        (Proc.online_cpus ()) rounds
        (String.concat ", "
           (List.map (fun (b : Membership.binary) -> b.label ^ " (" ^ b.exe ^ ")") bins));
      Fmt.pr
        "a member joins a running group; the coordinator of %d is killed; a member of %d is killed \
         and started again at its address 0.5 to 2.5 s later while each member casts every 20 ms@."
        size size;
      let r =
        try Membership.run ~binaries:bins ~rounds ~size ~sizes ~params ()
        with Unix.Unix_error (e, f, a) ->
          Error (Printf.sprintf "%s %s: %s" f a (Unix.error_message e))
      in
      let code = report "membership" Membership.pp_table Membership.to_json json r in
      match (r, save) with
      | Ok r, Some d -> (
          match Consort_cli.save_result ~dir:d ~name:"membership" (Membership.to_json r) with
          | Ok f ->
              Fmt.pr "kept in %s@." f;
              code
          | Error m -> Consort_cli.fail "bench membership" "--save %s: %s" d m)
      | _ -> code)

let membership_cmd =
  let binaries =
    Arg.(
      value & opt_all string []
      & info [ "consort" ] ~docv:"LABEL=PATH"
          ~doc:
            "A consort executable to run the members with, its rows labelled LABEL; repeat it to \
             measure several (such as a build before a change and one after) in one run, round by \
             round. Default: this executable, labelled $(b,this).")
  in
  let rounds =
    Arg.(
      value & opt Consort_cli.positive_int 5
      & info [ "rounds" ] ~docv:"N" ~doc:"Rounds, each through every measure and binary.")
  in
  let size =
    Arg.(
      value & opt Consort_cli.positive_int 3
      & info [ "size" ] ~docv:"N" ~doc:"Members of the group killed and restarted in.")
  in
  let sizes =
    Arg.(
      value
      & opt (list Consort_cli.positive_int) [ 3; 5 ]
      & info [ "sizes" ] ~docv:"N,..." ~doc:"Group sizes a member joins into (the Nth member).")
  in
  let save =
    Arg.(
      value
      & opt (some string) None
      & info [ "save" ] ~docv:"DIR"
          ~doc:"Also keep the JSON line in $(i,DIR)/membership-$(i,DATE)-$(i,TIME).json (UTC).")
  in
  Cmd.v
    (Consort_cli.info ~path:"bench membership" "membership"
       ~doc:
         "Join time, failover time after the coordinator's SIGKILL, and a restart at the same \
          address while casts flow (time back in the view, views per restart), for one or more \
          consort executables in one run.")
    Term.(const membership $ binaries $ rounds $ size $ sizes $ params $ json $ save)

let commands =
  [ join_cmd; failover_cmd; membership_cmd; rtt_cmd; throughput_cmd; peer_cmd; scale_cmd ]
