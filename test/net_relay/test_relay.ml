(* The impairment relay. On virtual time ([impair_relay simulate]) every
   impairment is checked exactly: which frames are lost, held back,
   duplicated, delayed, spaced by the rate limit or black-holed, and that a
   seed gives the same fates again. Then the impaired TCP benchmark runs
   end to end through the real relay (Consort and the kernel, IPv4 and
   IPv6), SHA-256 checked, with the relay's counters showing that it
   impaired both setups. *)

module I = Consort_net_bench.Tcp_impair_bench

let relay =
  let d = Filename.dirname Sys.executable_name in
  let p = Filename.concat d "../../bench/net/impair_relay" in
  if Sys.file_exists p then p else Alcotest.failf "no relay at %s (make build makes it)" p

(* [simulate spec frames] runs the relay on [(arrival_us, length)] frames:
   the deliveries [(time_us, index)] in order, and the STATS fields. *)
let simulate spec frames =
  let input = Filename.temp_file "relay" ".in" and output = Filename.temp_file "relay" ".out" in
  let oc = open_out input in
  List.iter (fun (t, len) -> Printf.fprintf oc "%d %d\n" t len) frames;
  close_out oc;
  let rc =
    Sys.command
      (Printf.sprintf "%s simulate %s <%s >%s 2>&1" (Filename.quote relay) (Filename.quote spec)
         (Filename.quote input) (Filename.quote output))
  in
  let ic = open_in_bin output in
  let text = really_input_string ic (in_channel_length ic) in
  close_in ic;
  Sys.remove input;
  Sys.remove output;
  if rc <> 0 then Alcotest.failf "impair_relay simulate %s: exit %d\n%s" spec rc text;
  let outs = ref [] and stats = ref [] in
  List.iter
    (fun l ->
      match String.split_on_char ' ' l with
      | [ "OUT"; t; i ] -> outs := (int_of_string t, int_of_string i) :: !outs
      | "STATS" :: "sim" :: kvs ->
          stats :=
            List.filter_map
              (fun kv ->
                match String.split_on_char '=' kv with
                | [ k; v ] -> Option.map (fun n -> (k, n)) (int_of_string_opt v)
                | _ -> None)
              kvs
      | _ -> ())
    (String.split_on_char '\n' text);
  ( List.rev !outs,
    fun k -> match List.assoc_opt k !stats with Some n -> n | None -> Alcotest.failf "no %s" k )

(* [n] frames of [len] bytes, one every [gap] microseconds. *)
let frames ?(gap = 100) ?(len = 1000) n = List.init n (fun i -> (i * gap, len))
let count p l = List.length (List.filter p l)

let loss () =
  let n = 5000 in
  let outs, stat = simulate "loss=10%,seed=7" (frames n) in
  let lost = stat "lost" in
  Alcotest.(check int) "every frame came in" n (stat "in");
  Alcotest.(check int) "delivered: the frames not lost" (n - lost) (List.length outs);
  if lost < n / 20 || lost > n * 3 / 20 then Alcotest.failf "%d of %d lost at 10%%" lost n;
  let seen = Array.make n 0 in
  List.iter (fun (_, i) -> seen.(i) <- seen.(i) + 1) outs;
  Alcotest.(check int) "no frame twice" 0 (count (fun c -> c > 1) (Array.to_list seen));
  (* Loss alone neither delays nor reorders. *)
  List.iter (fun (t, i) -> if t <> i * 100 then Alcotest.failf "frame %d out at %d us" i t) outs;
  Alcotest.(check bool) "in order" true (List.sort compare outs = outs)

let reorder () =
  let n = 2000 in
  let outs, stat = simulate "reorder=10%,delay=1ms,reorder_delay=2ms" (frames n) in
  let held = stat "reordered" in
  Alcotest.(check int) "every frame delivered" n (List.length outs);
  if held < n / 20 || held > n * 3 / 20 then Alcotest.failf "%d of %d held back at 10%%" held n;
  (* Each frame leaves 1 ms after it came, or 3 ms if held back. *)
  Alcotest.(check int) "held back 2 ms more" held (count (fun (t, i) -> t = (i * 100) + 3000) outs);
  Alcotest.(check int)
    "the others 1 ms" (n - held)
    (count (fun (t, i) -> t = (i * 100) + 1000) outs);
  (* Frames overtake the held ones: the order of delivery is not the order
     of arrival. *)
  let rec inversions acc = function
    | (_, a) :: ((_, b) :: _ as rest) -> inversions (if b < a then acc + 1 else acc) rest
    | _ -> acc
  in
  if inversions 0 outs < held / 2 then
    Alcotest.failf "only %d frames delivered out of order" (inversions 0 outs)

let duplicate () =
  let n = 2000 in
  let outs, stat = simulate "dup=10%" (frames n) in
  let dups = stat "duplicated" in
  if dups < n / 20 || dups > n * 3 / 20 then Alcotest.failf "%d of %d duplicated at 10%%" dups n;
  Alcotest.(check int) "delivered: every frame and the copies" (n + dups) (List.length outs);
  let seen = Array.make n 0 in
  List.iter (fun (_, i) -> seen.(i) <- seen.(i) + 1) outs;
  Alcotest.(check int) "frames delivered twice" dups (count (fun c -> c = 2) (Array.to_list seen))

let delay_jitter () =
  let n = 1000 in
  let outs, _ = simulate "delay=1ms,jitter=500us" (frames n) in
  Alcotest.(check int) "every frame delivered" n (List.length outs);
  let d = List.map (fun (t, i) -> t - (i * 100)) outs in
  List.iter (fun x -> if x < 1000 || x >= 1500 then Alcotest.failf "a frame delayed %d us" x) d;
  Alcotest.(check bool) "delays differ (jitter)" true (List.length (List.sort_uniq compare d) > 100)

let rate () =
  (* 8 Mbit/s is a byte a microsecond: 50 frames of 1000 bytes at once
     leave 1000 us apart, and a 10,000-byte queue holds 10 of them. *)
  let outs, stat = simulate "rate=8mbit,queue=10000" (List.init 50 (fun _ -> (0, 1000))) in
  Alcotest.(check (list (pair int int)))
    "departures spaced by the rate; the rest dropped"
    (List.init 10 (fun i -> ((i + 1) * 1000, i)))
    outs;
  Alcotest.(check int) "queue drops" 40 (stat "queue_drops");
  let outs, _ = simulate "rate=8mbit" (frames ~gap:2000 ~len:1000 20) in
  Alcotest.(check (list (pair int int)))
    "a link not busy only adds the frame's time"
    (List.init 20 (fun i -> ((i * 2000) + 1000, i)))
    outs

let mtu () =
  (* An IP packet of 1280 bytes is a 1294-byte frame. *)
  let input = List.concat (List.init 100 (fun i -> [ (i * 100, 1294); ((i * 100) + 50, 1295) ])) in
  let outs, stat = simulate "mtu=1280" input in
  Alcotest.(check int) "black-holed: every frame over the MTU" 100 (stat "blackholed");
  Alcotest.(check (list int))
    "delivered: every frame within it"
    (List.init 100 (fun i -> 2 * i))
    (List.map snd outs)

let seeded () =
  let spec = "loss=5%,reorder=5%,dup=5%,delay=1ms,jitter=200us" in
  let a, _ = simulate (spec ^ ",seed=3") (frames 3000) in
  let b, _ = simulate (spec ^ ",seed=3") (frames 3000) in
  let c, _ = simulate (spec ^ ",seed=4") (frames 3000) in
  Alcotest.(check bool) "the same seed, the same fates" true (a = b);
  Alcotest.(check bool) "another seed, other fates" true (a <> c);
  (* A frame's fate depends on its number only: a frame more at the end
     changes nothing before it. *)
  let d, _ = simulate (spec ^ ",seed=3") (frames 3001) in
  Alcotest.(check bool)
    "the first 3000 fates unchanged" true
    (List.filter (fun (_, i) -> i < 3000) d = a)

let bad_specs () =
  List.iter
    (fun spec ->
      let out = Filename.temp_file "relay" ".out" in
      let rc =
        Sys.command
          (Printf.sprintf "%s check %s >%s 2>&1" (Filename.quote relay) (Filename.quote spec)
             (Filename.quote out))
      in
      let ic = open_in_bin out in
      let text = really_input_string ic (in_channel_length ic) in
      close_in ic;
      Sys.remove out;
      Alcotest.(check int) (spec ^ ": exit 2") 2 rc;
      Alcotest.(check int)
        (spec ^ ": one line") 1
        (List.length (List.filter (( <> ) "") (String.split_on_char '\n' text)));
      Alcotest.(check bool)
        (spec ^ ": the bench refuses it too")
        true
        (Result.is_error (I.check_spec spec)))
    [ "loss=2"; "loss=120%"; "delay=1"; "delay=2h"; "rate=fast"; "mtu=20"; "colour=red"; "loss" ];
  List.iter
    (fun spec ->
      Alcotest.(check bool) (spec ^ ": accepted") true (I.check_spec spec = Ok ());
      Alcotest.(check int)
        (spec ^ ": the relay accepts it") 0
        (Sys.command
           (Printf.sprintf "%s check %s >/dev/null" (Filename.quote relay) (Filename.quote spec))))
    [
      "none";
      "loss=2%,reorder=5%,delay=1ms";
      "rate=100mbit,queue=200000,mtu=1280,seed=9";
      "dup=0.01,jitter=300us";
    ]

(* {1 End to end} *)

let contains hay needle =
  let n = String.length needle in
  let rec go i = i + n <= String.length hay && (String.sub hay i n = needle || go (i + 1)) in
  go 0

let cfg =
  {
    I.default with
    impair = "loss=3%,reorder=8%,dup=1%,delay=1ms";
    bytes = 1_500_000;
    seconds = 60.;
    (* Not the default (CUBIC) nor a usual host's default (CUBIC, BBR): the
       kernel's senders run what is asked, not the host's default. *)
    kernel_cc = "reno";
  }

let bench () =
  match I.impossible () with
  | Some why -> Alcotest.failf "the impaired TCP benchmark cannot run here: %s" why
  | None -> (
      match I.run cfg with
      | Error e -> Alcotest.failf "the impaired TCP benchmark failed: %s" e
      | Ok r ->
          Alcotest.(check (list string))
            "families" [ "IPv4"; "IPv6" ]
            (List.map (fun (f : I.family) -> f.name) r.families);
          List.iter
            (fun (f : I.family) ->
              List.iter
                (fun (name, (x : I.flow)) ->
                  Alcotest.(check int) (f.name ^ " " ^ name ^ ": every byte") cfg.bytes x.bytes;
                  Alcotest.(check int)
                    (f.name ^ " " ^ name ^ ": a SHA-256")
                    64 (String.length x.sha256))
                [
                  ("kernel -> consort", f.consort_in);
                  ("consort -> kernel", f.consort_out);
                  ("kernel -> kernel", f.kernel);
                ];
              List.iter
                (fun (name, (x : I.relay)) ->
                  if x.lost = 0 || x.reordered = 0 || x.duplicated = 0 then
                    Alcotest.failf "%s %s relay: %d frames, %d lost, %d reordered, %d duplicated"
                      f.name name x.frames x.lost x.reordered x.duplicated)
                [ ("consort", f.consort_relay); ("kernel", f.kernel_relay) ];
              List.iter
                (fun (name, (x : I.relay)) ->
                  if x.write_drops + x.socket_drops + x.device_drops > 0 then
                    Alcotest.failf
                      "%s %s relay: frames lost outside the SPEC: %d refused by the next hop, %d \
                       by the relay's socket, %d by the TAP devices"
                      f.name name x.write_drops x.socket_drops x.device_drops)
                [ ("consort", f.consort_relay); ("kernel", f.kernel_relay) ];
              (* Like for like: frames of at most the MTU through both
                 relays, no offloaded super-frames. *)
              List.iter
                (fun (name, (x : I.relay)) ->
                  if x.max_frame > cfg.mtu + 14 || x.max_frame < cfg.mtu then
                    Alcotest.failf "%s %s relay: largest frame %d bytes, the MTU %d" f.name name
                      x.max_frame cfg.mtu)
                [ ("consort", f.consort_relay); ("kernel", f.kernel_relay) ];
              (* Loss makes Consort's sender retransmit. *)
              if f.consort_out.retransmitted = 0 then
                Alcotest.failf "%s: Consort retransmitted nothing" f.name)
            r.families;
          let table = Fmt.str "%a" I.pp_table r in
          List.iter
            (fun s ->
              if not (contains table s) then Alcotest.failf "the table lacks %S:\n%s" s table)
            [
              "IPv4 kernel -> consort";
              "IPv6 consort -> kernel";
              "IPv6 kernel -> kernel";
              "target:";
              "kernel senders: reno";
              "largest frame 1514 bytes";
            ])

(* A congestion control the kernel does not have: one line, before any
   transfer (not a kernel sender failing while Consort waits its time out). *)
let unknown_cc () =
  match I.impossible () with
  | Some why -> Alcotest.failf "the impaired TCP benchmark cannot run here: %s" why
  | None ->
      (match I.run { cfg with kernel_cc = "nosuchcc"; seconds = 20. } with
      | Ok _ -> Alcotest.fail "a kernel sender ran an unknown congestion control"
      | Error e ->
          if String.contains e '\n' || not (contains e "--kernel-cc") then
            Alcotest.failf "not one line about --kernel-cc: %S" e);
      Alcotest.(check bool) "a bad name refused" true (Result.is_error (I.check_cc "cubic;reboot"))

let () =
  Alcotest.run "consort-relay"
    [
      ( "simulated",
        [
          Alcotest.test_case "loss: the frames lost, and only they, are missing" `Quick loss;
          Alcotest.test_case "reordering: held-back frames are overtaken" `Quick reorder;
          Alcotest.test_case "duplication: copies delivered" `Quick duplicate;
          Alcotest.test_case "delay and jitter within their bounds" `Quick delay_jitter;
          Alcotest.test_case "rate limit: spacing and a bounded queue" `Quick rate;
          Alcotest.test_case "MTU black hole" `Quick mtu;
          Alcotest.test_case "seeded: a frame's fate depends on its number" `Quick seeded;
          Alcotest.test_case "bad SPECs: one line and exit 2" `Quick bad_specs;
        ] );
      ( "relay",
        [
          Alcotest.test_case
            "consort and the kernel through the relay, IPv4 and IPv6, SHA-256 checked" `Quick bench;
          Alcotest.test_case "an unknown kernel congestion control: one line" `Quick unknown_cc;
        ] );
    ]
