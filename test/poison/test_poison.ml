(* A live three-member group of real processes on loopback takes a million
   hostile datagrams while it casts: random bytes, bytes behind the
   group's magic or the side channel's, over-size datagrams, datagrams of
   other groups and views, and datagrams of its own traffic captured with
   tcpdump and replayed, whole or truncated. No process may crash, no view
   may change, every cast must be delivered everywhere, the logs must meet
   the virtual synchrony specification, and the members' counters must
   show the drops by reason. *)

module P = Consort_member.Procs
module Vsync = Consort_spec.Vsync
module G = Consort_group
open Capture

let total =
  try int_of_string (Sys.getenv "POISON_DATAGRAMS") with Not_found | Failure _ -> 1_000_000

(* {1 The poison} *)

type kind = Random_bytes | Group_magic | Side_magic | Oversize | Foreign | Replay | Truncated

let kinds = [| Random_bytes; Group_magic; Side_magic; Oversize; Foreign; Replay; Truncated |]

let kind_name = function
  | Random_bytes -> "random bytes"
  | Group_magic -> "random behind the group magic"
  | Side_magic -> "random behind the side-channel magic"
  | Oversize -> "over-size"
  | Foreign -> "other groups and views"
  | Replay -> "replayed"
  | Truncated -> "replayed, truncated"

(* Random bytes: slices of one random megabyte, at random offsets. *)
let noise =
  lazy
    (let rng = Random.State.make [| 7 |] in
     String.init (1 lsl 20) (fun _ -> Char.chr (Random.State.int rng 256)))

let random_string rng n =
  let noise = Lazy.force noise in
  String.sub noise (Random.State.int rng (String.length noise - n)) n

let make rng captured = function
  | Random_bytes -> random_string rng (Random.State.int rng 200)
  | Group_magic ->
      String.make 1 (Char.chr G.Bottom.magic) ^ random_string rng (Random.State.int rng 120)
  | Side_magic ->
      String.make 1 (Char.chr G.Side.magic) ^ random_string rng (Random.State.int rng 200)
  | Oversize ->
      String.make 1 (Char.chr G.Bottom.magic)
      ^ random_string rng (20_000 + Random.State.int rng 40_000)
  | Foreign ->
      (* A well-formed Bottom header of another group or view, then a
         datagram of this group's traffic. *)
      let h =
        Consort.Codec.encode_string G.Bottom.codec
          (G.Bottom.Cast
             { group = Random.State.bits rng land 0xffff_ffff; origin = Random.State.int rng 3 })
      in
      let body =
        if captured = [||] then "" else captured.(Random.State.int rng (Array.length captured))
      in
      h ^ if String.length body > 7 then String.sub body 7 (String.length body - 7) else body
  | Replay -> captured.(Random.State.int rng (Array.length captured))
  | Truncated ->
      let s = captured.(Random.State.int rng (Array.length captured)) in
      String.sub s 0 (Random.State.int rng (max 1 (String.length s)))

(* Sends [total] datagrams round robin to [targets], at most [rate] a
   second; [between] runs every 10,000. Returns the count of each kind. *)
let poison ~targets ~captured ~rate ~between =
  let rng = Random.State.make [| 2026 |] in
  let sock = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  let addrs =
    Array.of_list (List.map (fun p -> Unix.ADDR_INET (Unix.inet_addr_loopback, p)) targets)
  in
  let counts = Array.make (Array.length kinds) 0 in
  let others = [| 0; 1; 2; 4; 5; 6 |] in
  let start = Unix.gettimeofday () in
  Fun.protect
    ~finally:(fun () -> Unix.close sock)
    (fun () ->
      for i = 0 to total - 1 do
        (* Over-size datagrams are one in fifty: each costs the kernel
           tens of kilobytes of copying. The other kinds are equally likely. *)
        let k =
          if Random.State.int rng 50 = 0 then 3
          else others.(Random.State.int rng (Array.length others))
        in
        let k = if captured = [||] && (kinds.(k) = Replay || kinds.(k) = Truncated) then 0 else k in
        let d = Bytes.unsafe_of_string (make rng captured kinds.(k)) in
        counts.(k) <- counts.(k) + 1;
        (try ignore (Unix.sendto sock d 0 (Bytes.length d) [] addrs.(i mod Array.length addrs))
         with Unix.Unix_error ((Unix.ENOBUFS | Unix.EAGAIN | Unix.EMSGSIZE), _, _) -> ());
        if i mod 10_000 = 9_999 then begin
          between ();
          let ahead = (float_of_int (i + 1) /. rate) -. (Unix.gettimeofday () -. start) in
          if ahead > 0. then Unix.sleepf ahead
        end
      done);
  counts

let million () =
  let dir = temp_dir () in
  let ms = P.create ~dir 3 in
  let peers = List.map (fun m -> m.P.addr) ms in
  let out m = Filename.concat dir (Printf.sprintf "out-%d.txt" m.P.idx) in
  Fun.protect
    ~finally:(fun () ->
      List.iter P.kill ms;
      P.remove_dir dir)
    (fun () ->
      List.iter (fun m -> P.start ~exe:(exe ()) ~group:"poison" ~peers ~output:(out m) m) ms;
      expect "the three form one group" (P.wait_until ~timeout:30. (fun () -> P.same_view ms));
      let vid = match P.current_view (List.hd ms) with Some (v, _) -> v | None -> assert false in
      let sent = ref 0 in
      let cast_round tag =
        List.iter (fun m -> P.cast m (Printf.sprintf "%s-%d-%d" tag m.P.idx !sent)) ms;
        incr sent
      in
      (* Their own traffic, captured to be replayed. *)
      let captured =
        capture ~dir ms (fun () ->
            for _ = 1 to 30 do
              cast_round "warm";
              Unix.sleepf 0.02
            done;
            Unix.sleepf 0.5)
      in
      let captured = Array.of_list (List.map snd captured) in
      Alcotest.(check bool) "traffic was captured" true (Array.length captured >= 30);
      let t0 = Unix.gettimeofday () in
      let counts =
        poison
          ~targets:(List.map (fun m -> port_of m.P.addr) ms)
          ~captured ~rate:100_000.
          ~between:(fun () -> cast_round "during")
      in
      let secs = Unix.gettimeofday () -. t0 in
      let expected = 3 * !sent in
      expect "every cast is delivered everywhere"
        (P.wait_until ~timeout:30. (fun () -> List.for_all (fun m -> P.deliveries m >= expected) ms));
      List.iter
        (fun m ->
          Alcotest.(check bool)
            (Printf.sprintf "member %d is still running" m.P.idx)
            false (P.reap m);
          match P.current_view m with
          | Some (v, members) ->
              Alcotest.(check string)
                (Printf.sprintf "member %d: the view did not change" m.P.idx)
                vid v;
              Alcotest.(check int) "three members" 3 (List.length members)
          | None -> Alcotest.fail "no view")
        ms;
      expect "everyone leaves cleanly" (P.leave_all ms ~timeout:20.);
      (match Vsync.check_files ~quiescent:false (P.all_logs ms) with
      | Ok _ -> ()
      | Error errs ->
          Alcotest.failf "the logs break the specification:\n%s"
            (String.concat "\n" (List.map (Fmt.str "%a" Vsync.pp_file_problem) errs)));
      List.iter
        (fun m ->
          Alcotest.(check int)
            (Printf.sprintf "member %d: deliveries" m.P.idx)
            expected (P.deliveries m))
        ms;
      Printf.printf "%d datagrams in %.1f s (%.0f/s), %d casts delivered at each member\n" total
        secs
        (float_of_int total /. secs)
        expected;
      Array.iteri (fun i k -> Printf.printf "  %-40s %d\n" (kind_name k) counts.(i)) kinds;
      let sum = Array.make 6 0 in
      List.iter
        (fun m ->
          let cs = counters (out m) in
          Printf.printf "member %d: %s\n" m.P.idx
            (String.concat " " (List.map (fun (k, v) -> Printf.sprintf "%s=%d" k v) cs));
          List.iteri
            (fun i k -> sum.(i) <- sum.(i) + get cs k)
            [
              "bottom.garbage";
              "bottom.wrong_group";
              "group.side_garbage";
              "bottom.bad_rank";
              "bottom.from_self";
              "group.views";
            ])
        ms;
      Alcotest.(check bool) "undecodable datagrams counted" true (sum.(0) > 0);
      Alcotest.(check bool) "other groups' datagrams counted" true (sum.(1) > 0);
      Alcotest.(check bool) "bad side-channel datagrams counted" true (sum.(2) > 0);
      let dropped = sum.(0) + sum.(1) + sum.(2) + sum.(3) + sum.(4) in
      Printf.printf "dropped by Bottom and the side channel: %d of %d\n" dropped total;
      Alcotest.(check bool) "the counted drops do not exceed what was sent" true (dropped <= total))

let () =
  Alcotest.run "poison"
    [ ("group", [ Alcotest.test_case "a million hostile datagrams" `Slow million ]) ]
