(* A Privacy group with per-view keys: three real processes on loopback and
   a fourth member run in this process, which is then excluded (the three
   stop hearing it) and goes on running: it holds the group secret, its key
   pair and the key of every view it was in, and tcpdump captures all the
   group's traffic. With all that it reads the casts of its own views (the
   attack works) and none of the views after its exclusion, takes no key
   from their Installs, and its casts of old, resealed under every key it
   holds, reach no one: the three count them as under an unknown key or the
   wrong one, deliver each cast once, and change no view. A member that
   joins then gets the current key and reads. *)

open Consort
open Capture
module Vsync = Consort_spec.Vsync
module Seal = Consort_seal.Seal
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module S = Seal.Make (Udp)
module G = Consort_group.Group.Make (S)
module Side = Consort_group.Side

let params = "suspect.timeout=2s,suspect.verify=500ms"

let excluded () =
  let dir = temp_dir () in
  let key = Filename.concat dir "group.key" in
  let secret = Seal.generate () in
  (match Seal.write_key key secret with Ok () -> () | Error e -> Alcotest.fail e);
  let ms = P.create ~dir 5 in
  let three = List.filteri (fun i _ -> i < 3) ms and xm = List.nth ms 3 and jm = List.nth ms 4 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let out m = Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx) in
  (* The member in this process. *)
  let loop = Loop.create () in
  let xt = S.wrap ~rekey:true ~group:"rekeyed" loop (Some (secret, Seal.Privacy)) in
  let helds = ref [] in
  let x_views = ref [] in
  let cb =
    {
      Consort_group.Group.view =
        (fun v ->
          x_views := v :: !x_views;
          Option.iter (fun h -> helds := h :: !helds) (S.held xt));
      cast = (fun ~origin:_ _ -> ());
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  let params' =
    match Params.of_string params with Ok p -> p | Error _ -> Alcotest.fail "params"
  in
  let layers =
    match Consort_group.Properties.layers Consort_group.Properties.vsync with
    | Ok l -> l
    | Error _ -> assert false
  in
  let x = ref None in
  (* Waits while this process's member runs. *)
  let wait ~timeout cond =
    let deadline = Unix.gettimeofday () +. timeout in
    let rec go () =
      if cond () then true
      else if Unix.gettimeofday () > deadline then false
      else begin
        Loop.run ~timeout:(Time.of_ms 50) loop;
        go ()
      end
    in
    go ()
  in
  Fun.protect
    ~finally:(fun () ->
      Option.iter G.crash !x;
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      let before = ref 0 and after = ref 0 in
      (* tcpdump runs from before the group forms. *)
      let captured =
        capture ~dir ms (fun () ->
            List.iter
              (fun m ->
                P.start ~exe:(exe ()) ~props:"vsync,Privacy" ~params ~extra:[ "--key"; key ]
                  ~group:"rekeyed" ~peers ~output:(out m) m)
              three;
            (match
               G.join ~params:params' ~peers ?rekey:(S.rekey xt) ~layers xt ~group:"rekeyed"
                 ~addr:xm.P.addr cb
             with
            | Ok g -> x := Some g
            | Error e -> Alcotest.failf "join: %a" Consort_group.Group.pp_join_error e);
            let xg = Option.get !x in
            let four () =
              let xv = (G.view xg).Consort_group.Group.vid in
              Array.length (G.view xg).Consort_group.Group.members = 4
              && List.for_all
                   (fun m ->
                     match P.current_view m with
                     | Some (v, l) -> v = xv && List.length l = 4
                     | None -> false)
                   three
            in
            expect "the four form one group" (wait ~timeout:40. four);
            List.iter
              (fun m ->
                P.cast m (Printf.sprintf "BEFORE-MARKER-%d" m.P.idx);
                incr before)
              three;
            expect "the casts before are delivered"
              (wait ~timeout:15. (fun () -> List.for_all (fun m -> P.deliveries m >= !before) three));
            if not (four ()) then Alcotest.fail "the group changed before x was cut off";
            (* The three stop hearing x; it runs on, alone. *)
            P.partition [ three; [ xm ] ];
            expect "the three exclude x" (wait ~timeout:40. (fun () -> P.same_view three));
            for i = 1 to 10 do
              List.iter
                (fun m ->
                  P.cast m (Printf.sprintf "AFTER-MARKER-%d-%d" m.P.idx i);
                  incr after)
                three;
              ignore (wait ~timeout:0.02 (fun () -> false))
            done;
            expect "the casts after are delivered"
              (wait ~timeout:15. (fun () ->
                   List.for_all (fun m -> P.deliveries m >= !before + !after) three)))
      in
      let xg = Option.get !x in
      let datagrams = List.map snd captured in
      if List.length datagrams < 50 then
        Alcotest.failf "only %d datagrams captured" (List.length datagrams);
      let vid =
        match P.current_view (List.hd three) with
        | Some (v, _) -> v
        | None -> Alcotest.fail "no view"
      in
      (* The attack: every key x held, and any key wrapped for it in a
         captured Install. *)
      let rk = Option.get (S.rekey xt) in
      let me = G.me xg in
      let all_helds () = !helds @ Option.to_list (S.held xt) in
      let stolen = ref 0 in
      List.iter
        (fun d ->
          List.iter
            (fun h ->
              match Seal.open_held h d with
              | Some p when String.length p > 0 && Char.code p.[0] = Side.magic -> (
                  match Codec.decode_string Side.codec p with
                  | Ok (Side.Install { vid; members; keys; _ } as v) ->
                      let maker = Side.installer vid in
                      List.iter
                        (fun (_, w) ->
                          match List.find_opt (fun (m : Side.member) -> m.eid = maker) members with
                          | Some mk -> (
                              match
                                rk.Consort_group.Group.unwrap ~vid ~me ~context:(Side.context v)
                                  ~installer:(maker, mk.pub) w
                              with
                              | Some activate ->
                                  activate ();
                                  if not (List.exists (fun (m : Side.member) -> m.eid = me) members)
                                  then incr stolen;
                                  Option.iter (fun h -> helds := h :: !helds) (S.held xt)
                              | None -> ())
                          | None -> ())
                        keys
                  | _ -> ())
              | _ -> ())
            (all_helds ()))
        datagrams;
      let read =
        List.concat_map
          (fun d -> List.filter_map (fun h -> Seal.open_held h d) (all_helds ()))
          datagrams
      in
      List.iter
        (fun d -> if contains d "MARKER" then Alcotest.fail "a payload is in clear on the wire")
        datagrams;
      Alcotest.(check bool)
        "x reads the casts of the view it was in" true
        (List.exists (fun p -> contains p "BEFORE-MARKER") read);
      Alcotest.(check int) "x unwraps no key of a view it is not in" 0 !stolen;
      List.iter
        (fun p ->
          if contains p "AFTER-MARKER" then
            Alcotest.fail "x read a cast of a view after its exclusion")
        read;
      (* x's casts of old (what it can open), resealed under every key it
         holds, and under the group secret, as a new sender. *)
      let n = ref 0 in
      let forged =
        List.concat_map
          (fun p ->
            if String.length p > 0 && Char.code p.[0] <> Side.magic then
              List.concat_map
                (fun h ->
                  incr n;
                  let id = Printf.sprintf "%016d" !n in
                  let wall_ms = Int64.of_float (Unix.gettimeofday () *. 1000.) in
                  List.filter_map
                    (fun under ->
                      Option.map
                        (fun d -> (under, d))
                        (Seal.seal_held h ~under ~id ~counter:1L ~wall_ms p))
                    [ `View; `Secret ])
                (all_helds ())
            else [])
          (List.sort_uniq compare read)
      in
      let forged = List.filteri (fun i _ -> i < 20_000) forged in
      let under_view = List.length (List.filter (fun (u, _) -> u = `View) forged) in
      let under_secret = List.length forged - under_view in
      send_all (List.map (fun m -> port_of m.P.addr) three) (List.map snd forged);
      ignore (wait ~timeout:2. (fun () -> false));
      List.iter
        (fun m ->
          P.cast m (Printf.sprintf "LAST-MARKER-%d" m.P.idx);
          incr after)
        three;
      expect "casts still delivered"
        (wait ~timeout:15. (fun () ->
             List.for_all (fun m -> P.deliveries m >= !before + !after) three));
      List.iter
        (fun m ->
          match P.current_view m with
          | Some (v, members) ->
              Alcotest.(check string) "no view change" vid v;
              Alcotest.(check int) "three members" 3 (List.length members)
          | None -> Alcotest.fail "no view")
        three;
      G.crash xg;
      x := None;
      (* A member that joins now gets the current key and reads. *)
      P.start ~exe:(exe ()) ~props:"vsync,Privacy" ~params ~extra:[ "--key"; key ] ~group:"rekeyed"
        ~peers ~output:(out jm) jm;
      let four = three @ [ jm ] in
      expect "a new member joins" (P.wait_until ~timeout:30. (fun () -> P.same_view four));
      P.cast jm "JOINED-MARKER-j";
      P.cast (List.hd three) "JOINED-MARKER-0";
      after := !after + 2;
      expect "the joiner's casts and the others' are delivered"
        (P.wait_until ~timeout:15. (fun () ->
             P.deliveries jm >= 2
             && List.for_all (fun m -> P.deliveries m >= !before + !after) three));
      expect "everyone leaves cleanly" (P.leave_all four ~timeout:20.);
      List.iter
        (fun m ->
          Alcotest.(check int) "each cast delivered once" (!before + !after) (P.deliveries m))
        three;
      Alcotest.(check int) "the joiner delivers the casts of its view" 2 (P.deliveries jm);
      (match Vsync.check_files ~quiescent:false (P.all_logs four) with
      | Ok _ -> ()
      | Error errs ->
          Alcotest.failf "the logs break the specification:\n%s"
            (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
      let total k = List.fold_left (fun acc m -> acc + get (counters (out m)) k) 0 three in
      Printf.printf "captured=%d forged=%d unknown_key=%d wrong_key=%d rekeys=%d bad_tag=%d\n"
        (List.length datagrams) (List.length forged) (total "seal.unknown_key")
        (total "seal.wrong_key") (total "seal.rekeys") (total "seal.bad_tag");
      (* Each forgery went to each of the three. *)
      Alcotest.(check bool)
        "forged under old view keys: each counted as under an unknown key" true
        (total "seal.unknown_key" >= 3 * under_view);
      Alcotest.(check bool)
        "forged under the group secret: each counted as under the wrong key" true
        (total "seal.wrong_key" >= 3 * under_secret);
      Alcotest.(check bool)
        "each member installed a key per view" true
        (total "seal.rekeys" >= 3 * 3))

let () =
  Alcotest.run "rekey"
    [ ("group", [ Alcotest.test_case "an excluded member with every old key" `Slow excluded ]) ]
