(* Issue 29, defect 4, with real processes: an unsealed group of three on
   loopback, casting, while a stranger sends each member forged
   side-channel messages of every kind (discovery messages of partitions
   that do not exist, bit-flipped copies of what the members would send,
   merge requests, Installs, their acknowledgements, switch requests,
   leaves, probes and answers). No view may change, every cast must be
   delivered everywhere, and the logs must meet the specification. *)

open Capture
module Vsync = Consort_spec.Vsync
module Side = Consort_group.Side
module Codec = Consort.Codec

let lesser rng s =
  if s = "" then "!"
  else
    let b = Bytes.of_string s in
    let i = Random.State.int rng (Bytes.length b) in
    let c = Char.code (Bytes.get b i) in
    Bytes.set b i (Char.chr (c land (c - 1)));
    Bytes.to_string b

let flip rng s =
  if s = "" then s
  else
    let b = Bytes.of_string s in
    let i = Random.State.int rng (Bytes.length b) in
    Bytes.set b i (Char.chr (Char.code (Bytes.get b i) lxor (1 lsl Random.State.int rng 8)));
    Bytes.to_string b

(* One forgery for a group whose view is [vid] of [members] (ids, whose
   addresses they begin with), as [stack]. *)
let forge rng ~group ~vid ~ltime ~members ~stack =
  let n = Array.length members in
  let any () = members.(Random.State.int rng n) in
  let coord = members.(0) in
  let addr_of e = match String.index_opt e '#' with Some i -> String.sub e 0 i | None -> e in
  let member e = { Side.eid = e; addr = addr_of e; pub = "" } in
  let made_up () = { Side.eid = lesser rng (any ()); addr = addr_of (any ()); pub = "" } in
  let st = { Side.epoch = 0; id = stack } in
  let m =
    match Random.State.int rng 9 with
    | 0 ->
        Side.Gossip
          {
            group;
            vid = flip rng vid;
            ltime;
            coord = { (member coord) with eid = lesser rng coord };
            size = n;
            stack = st;
          }
    | 1 ->
        Side.Gossip
          {
            group;
            vid = "1:" ^ lesser rng coord;
            ltime = 1;
            coord = made_up ();
            size = 1;
            stack = st;
          }
    | 2 ->
        Side.Merge_req
          {
            group;
            vid = "1:" ^ lesser rng coord;
            ltime = 1;
            members = [ made_up () ];
            stack = st;
            dst = coord;
          }
    | 3 ->
        Side.Install
          {
            group;
            vid = Printf.sprintf "%d:%s" (ltime + 1) (any ());
            ltime = ltime + 1;
            members = List.map member (Array.to_list members);
            leavers = [];
            preds = [ vid ];
            stack = st;
            keys = [];
          }
    | 4 -> Side.Install_ack { group; vid; eid = any (); dst = coord }
    | 5 -> Side.Switch_req { group; vid; stack = { Side.epoch = 1; id = stack }; dst = coord }
    | 6 ->
        let leaving = any () in
        Side.Install
          {
            group;
            vid = Printf.sprintf "%d:%s" (ltime + 1) coord;
            ltime = ltime + 1;
            members =
              List.filter_map
                (fun e -> if e = leaving then None else Some (member e))
                (Array.to_list members);
            leavers = [ leaving ];
            preds = [ vid ];
            stack = st;
            keys = [];
          }
    | 7 -> Side.Probe { group; vid; nonce = "n"; eid = lesser rng coord; dst = any () }
    | _ -> Side.Probe_ack { group; vid; nonce = "n"; eid = any (); dst = coord }
  in
  let bytes = Codec.encode_string Side.codec m in
  if Random.State.int rng 5 = 0 then flip rng bytes else bytes

let forged () =
  let dir = temp_dir () in
  let ms = P.create ~dir 3 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let group = "forged-side" in
  let out m = Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx) in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      List.iter (fun m -> P.start ~exe:(exe ()) ~props:"vsync" ~group ~peers ~output:(out m) m) ms;
      expect "the three form one group" (P.wait_until ~timeout:30. (fun () -> P.same_view ms));
      let vid, members =
        match P.current_view (List.hd ms) with Some v -> v | None -> Alcotest.fail "no view"
      in
      let ltime =
        match String.index_opt vid ':' with
        | Some i -> int_of_string (String.sub vid 0 i)
        | None -> 0
      in
      (* The members' stack: vsync's layers with no tunable set (a
         discovery message on another stack is reported, never merged). *)
      let stack =
        match Consort_group.Properties.(layers vsync) with
        | Ok layers ->
            Consort_group.Stack_id.(to_string (of_layers ~params:Consort.Params.empty layers))
        | Error _ -> Alcotest.fail "vsync's layers"
      in
      let rng = Random.State.make [| 29 |] in
      let targets = List.map (fun m -> port_of m.P.addr) ms in
      let sent = ref 0 in
      for round = 1 to 20 do
        List.iter (fun m -> P.cast m (Printf.sprintf "cast-%d-%d" m.P.idx round)) ms;
        send_all targets
          (List.init 100 (fun _ ->
               forge rng ~group ~vid ~ltime ~members:(Array.of_list members) ~stack));
        sent := !sent + 100;
        Unix.sleepf 0.1
      done;
      expect "every cast delivered everywhere"
        (P.wait_until ~timeout:10. (fun () -> List.for_all (fun m -> P.deliveries m >= 60) ms));
      Unix.sleepf 1.;
      List.iter
        (fun m ->
          match P.current_view m with
          | Some (v, l) ->
              Alcotest.(check string) "no view change" vid v;
              Alcotest.(check int) "three members" 3 (List.length l)
          | None -> Alcotest.fail "no view")
        ms;
      expect "everyone leaves cleanly" (P.leave_all ms ~timeout:20.);
      List.iter (fun m -> Alcotest.(check int) "each cast once" 60 (P.deliveries m)) ms;
      (match Vsync.check_files ~quiescent:false (P.all_logs ms) with
      | Ok _ -> ()
      | Error errs ->
          Alcotest.failf "the logs break the specification:\n%s"
            (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
      let total k = List.fold_left (fun acc m -> acc + get (counters (out m)) k) 0 ms in
      Printf.printf "%d forgeries per member; side_garbage=%d side_misdirected=%d\n" !sent
        (total "group.side_garbage") (total "group.side_misdirected");
      Alcotest.(check bool)
        "forgeries counted" true
        (total "group.side_garbage" + total "group.side_misdirected" > 0))

let () =
  Alcotest.run "forged-side"
    [ ("group", [ Alcotest.test_case "forged side-channel messages" `Slow forged ]) ]
