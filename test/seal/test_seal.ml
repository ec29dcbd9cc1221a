(* Sealed datagrams over the simulator: what passes, what is dropped and
   counted (altered, forged, replayed, stale, of another secret or mode),
   what an eavesdropper sees, the bound on what strangers make a member
   remember, and key files. *)

open Consort
module Sim = Consort_engine.Sim
module Seal = Consort_seal.Seal
module S = Seal.Make (Sim)

let secret c =
  match Seal.secret_of_string (String.make 32 c) with Ok s -> s | Error e -> failwith e

type node = { conn : S.connection; got : string list ref; raw : string list ref }

(* A sealed connection at [addr] that records what it delivers and, through
   the inner transport's filter, the raw datagrams that reach it. *)
let node ?(wall = fun () -> 1_700_000_000.) ?group net addr seal =
  let got = ref [] and raw = ref [] in
  let t = S.wrap ~wall ?group net seal in
  match
    S.open_ t addr (fun _ ->
        {
          S.recv =
            (fun ~src:_ v ->
              got := Iovec.to_string v :: !got;
              Iovec.release v);
          closed = ignore;
        })
  with
  | Error e -> Alcotest.failf "open: %a" Transport.pp_error e
  | Ok conn ->
      ignore
        (S.control conn
           (S.Drop_filter
              (Some
                 (fun ~src:_ cs ->
                   raw := Cstruct.to_string cs :: !raw;
                   false))));
      { conn; got; raw }

(* An unsealed sender, for injecting bytes. *)
let raw_sender net addr =
  match
    Sim.open_ net addr (fun _ -> { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
  with
  | Ok c -> c
  | Error e -> Alcotest.failf "open: %a" Transport.pp_error e

let send_s net conn dst s =
  let m = Msg.of_string Pool.default s in
  (match S.send conn ~dst m with
  | Ok () -> ()
  | Error e -> Alcotest.failf "send: %a" Transport.pp_error e);
  Msg.release m;
  Sim.run net

let inject net c dst s =
  let m = Msg.of_string Pool.default s in
  ignore (Sim.send c ~dst m);
  Msg.release m;
  Sim.run net

let contains s sub =
  let n = String.length s and k = String.length sub in
  let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
  go 0

let stats_t = Alcotest.testable Seal.pp_stats ( = )

let round_trip mode () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', mode)) and b = node net "b" (Some (secret 'k', mode)) in
  send_s net a.conn "b" "the payload of a cast";
  Alcotest.(check (list string)) "delivered as sent" [ "the payload of a cast" ] !(b.got);
  let wire = List.hd !(b.raw) in
  Alcotest.(check int) "overhead" (String.length "the payload of a cast" + 51) (String.length wire);
  Alcotest.(check bool)
    "the payload is in clear on the wire only without Privacy" (mode = Seal.Auth)
    (contains wire "the payload of a cast");
  Alcotest.(check int) "opened" 1 (S.stats b.conn).opened;
  Alcotest.(check int) "sealed" 1 (S.stats a.conn).sealed;
  Alcotest.(check int) "mtu less the overhead" (65507 - Seal.overhead) (S.query a.conn).mtu

let altered () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Privacy))
  and b = node net "b" (Some (secret 'k', Seal.Privacy)) in
  let x = raw_sender net "x" in
  send_s net a.conn "b" "original";
  let wire = List.hd !(b.raw) in
  (* Every single-byte change, injected before the original could be
     replayed: none is delivered. *)
  String.iteri
    (fun i c ->
      let b' = Bytes.of_string wire in
      Bytes.set b' i (Char.chr (Char.code c lxor 0x40));
      inject net x "b" (Bytes.to_string b'))
    wire;
  for k = 0 to String.length wire - 1 do
    inject net x "b" (String.sub wire 0 k)
  done;
  Alcotest.(check (list string)) "only the original was delivered" [ "original" ] !(b.got);
  let st = S.stats b.conn in
  Alcotest.(check int)
    "every alteration dropped"
    (2 * String.length wire)
    (st.bad_tag + st.malformed + st.clear + st.replayed);
  Alcotest.(check bool) "most fail the tag" true (st.bad_tag >= String.length wire - 2)

let replayed () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Auth))
  and b = node net "b" (Some (secret 'k', Seal.Auth)) in
  let x = raw_sender net "x" in
  for i = 1 to 5 do
    send_s net a.conn "b" (Printf.sprintf "m%d" i)
  done;
  let captured = List.rev !(b.raw) in
  List.iter (inject net x "b") captured;
  List.iter (inject net x "b") captured;
  Alcotest.(check int) "each delivered once" 5 (List.length !(b.got));
  Alcotest.(check int) "replays counted" 10 (S.stats b.conn).replayed

let window () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Auth))
  and b = node net "b" (Some (secret 'k', Seal.Auth)) in
  let x = raw_sender net "x" in
  (* 1500 datagrams captured, none delivered yet (b drops them all while
     its filter says so), then delivered out of order. *)
  ignore
    (S.control b.conn
       (S.Drop_filter
          (Some
             (fun ~src:_ cs ->
               b.raw := Cstruct.to_string cs :: !(b.raw);
               true))));
  for i = 1 to 1500 do
    send_s net a.conn "b" (string_of_int i)
  done;
  ignore (S.control b.conn (S.Drop_filter None));
  let d = Array.of_list (List.rev !(b.raw)) in
  (* The newest first, then the others from newest to oldest: the 1024
     most recent counters are accepted once, older ones refused. *)
  for i = 1499 downto 0 do
    inject net x "b" d.(i)
  done;
  Alcotest.(check int) "within the window: delivered" 1024 (List.length !(b.got));
  Alcotest.(check int) "older than the window: refused" (1500 - 1024) (S.stats b.conn).replayed;
  inject net x "b" d.(1400);
  Alcotest.(check int)
    "a repeat within the window: refused"
    (1500 - 1024 + 1)
    (S.stats b.conn).replayed

let wrong_secret_and_mode () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Auth)) in
  let b = node net "b" (Some (secret 'j', Seal.Auth)) in
  let c = node net "c" (Some (secret 'k', Seal.Privacy)) in
  let d = node net "d" None in
  send_s net a.conn "b" "one";
  send_s net a.conn "c" "two";
  send_s net a.conn "d" "three";
  send_s net d.conn "a" "four";
  Alcotest.(check (list string)) "another secret: nothing" [] !(b.got);
  Alcotest.(check int) "another secret: bad tag" 1 (S.stats b.conn).bad_tag;
  Alcotest.(check (list string)) "another mode: nothing" [] !(c.got);
  Alcotest.(check int) "another mode" 1 (S.stats c.conn).wrong_mode;
  Alcotest.(check int)
    "an unsealed member hands up the sealed bytes as they are" 1 (List.length !(d.got));
  Alcotest.(check (list string)) "a sealed member ignores clear datagrams" [] !(a.got);
  Alcotest.(check int) "clear counted" 1 (S.stats a.conn).clear

let stale () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Auth)) in
  let b = node ~wall:(fun () -> 1_700_000_000. +. 61.) net "b" (Some (secret 'k', Seal.Auth)) in
  let c = node ~wall:(fun () -> 1_700_000_000. +. 59.) net "c" (Some (secret 'k', Seal.Auth)) in
  send_s net a.conn "b" "late";
  send_s net a.conn "c" "in time";
  Alcotest.(check int) "over a minute off: stale" 1 (S.stats b.conn).stale;
  Alcotest.(check (list string)) "within a minute: delivered" [ "in time" ] !(c.got)

(* Warnings the seal logs while [f] runs. *)
let warnings f =
  let said = ref [] in
  let old = Logs.reporter () and level = Logs.level () in
  Logs.set_level (Some Logs.Warning);
  Logs.set_reporter
    {
      Logs.report =
        (fun _src lvl ~over k msgf ->
          msgf (fun ?header:_ ?tags:_ fmt ->
              Format.kasprintf
                (fun s ->
                  if lvl = Logs.Warning then said := s :: !said;
                  over ();
                  k ())
                fmt));
    };
  Fun.protect
    ~finally:(fun () ->
      Logs.set_reporter old;
      Logs.set_level level)
    f;
  List.rev !said

(* A clock 90 s off: dropped, and said once per 10 s, naming the peer and
   the offset; a replay of what was seen says nothing of the clocks. *)
let stale_warned () =
  let net = Sim.create () in
  let a = node net "a" (Some (secret 'k', Seal.Auth)) in
  let b = node ~wall:(fun () -> 1_700_000_000. +. 90.) net "b" (Some (secret 'k', Seal.Auth)) in
  let said =
    warnings (fun () ->
        for i = 1 to 5 do
          send_s net a.conn "b" (Printf.sprintf "late %d" i)
        done)
  in
  Alcotest.(check int) "all stale" 5 (S.stats b.conn).stale;
  Alcotest.(check (list string)) "none delivered" [] !(b.got);
  (match said with
  | [ w ] ->
      Alcotest.(check bool) ("names the peer: " ^ w) true (contains w "from a ");
      Alcotest.(check bool) ("says the offset: " ^ w) true (contains w "90.0 s behind");
      Alcotest.(check bool) ("names the parameter: " ^ w) true (contains w "seal.freshness")
  | l -> Alcotest.failf "%d warnings for 5 stale datagrams in a moment, not 1" (List.length l));
  Sim.run ~until:(Sim.now net + Time.of_sec 11.) net;
  let again = warnings (fun () -> send_s net a.conn "b" "still late") in
  Alcotest.(check int) "said again 11 s later" 1 (List.length again);
  (* Within the parameter: delivered. *)
  let c =
    let got = ref [] in
    let t =
      S.wrap ~freshness:(Time.of_sec 120.)
        ~wall:(fun () -> 1_700_000_000. +. 90.)
        net
        (Some (secret 'k', Seal.Auth))
    in
    match
      S.open_ t "c" (fun _ ->
          {
            S.recv =
              (fun ~src:_ v ->
                got := Iovec.to_string v :: !got;
                Iovec.release v);
            closed = ignore;
          })
    with
    | Ok conn -> (conn, got)
    | Error e -> Alcotest.failf "open: %a" Transport.pp_error e
  in
  send_s net a.conn "c" "within 120 s";
  Alcotest.(check (list string)) "seal.freshness=120s: delivered" [ "within 120 s" ] !(snd c)

(* Two groups sharing one key file: neither opens the other's datagrams. *)
let groups_apart () =
  let net = Sim.create () in
  let a = node ~group:"left" net "a" (Some (secret 'k', Seal.Privacy)) in
  let b = node ~group:"right" net "b" (Some (secret 'k', Seal.Privacy)) in
  let c = node ~group:"left" net "c" (Some (secret 'k', Seal.Privacy)) in
  send_s net a.conn "b" "for left only";
  send_s net a.conn "c" "for left only";
  Alcotest.(check (list string)) "another group: nothing" [] !(b.got);
  Alcotest.(check int) "another group: bad tag" 1 (S.stats b.conn).bad_tag;
  Alcotest.(check (list string)) "the same group: delivered" [ "for left only" ] !(c.got);
  let ba = node ~group:"left" net "d" (Some (secret 'k', Seal.Auth)) in
  let bb = node ~group:"lef" net "e" (Some (secret 'k', Seal.Auth)) in
  send_s net ba.conn "e" "t";
  Alcotest.(check int) "Auth too, names one letter apart" 1 (S.stats bb.conn).bad_tag

let flood () =
  let net = Sim.create () in
  let b = node net "b" (Some (secret 'k', Seal.Privacy)) in
  let x = raw_sender net "x" in
  let rng = Random.State.make [| 5 |] in
  for _ = 1 to 10_000 do
    let s =
      String.init
        (Seal.overhead + Random.State.int rng 64)
        (fun _ -> Char.chr (Random.State.int rng 256))
    in
    let s = "\xc5\x02" ^ String.sub s 2 (String.length s - 2) in
    inject net x "b" s
  done;
  Alcotest.(check int) "all forged" 10_000 (S.stats b.conn).bad_tag;
  Alcotest.(check int) "nothing remembered of forgers" 0 (S.senders b.conn);
  (* Real senders: at most 4096 remembered. *)
  let a = node net "a" (Some (secret 'k', Seal.Privacy)) in
  send_s net a.conn "b" "real";
  Alcotest.(check int) "a real sender is remembered" 1 (S.senders b.conn);
  Alcotest.(check (list string)) "and heard" [ "real" ] !(b.got)

let unsealed_passes () =
  let net = Sim.create () in
  let a = node net "a" None and b = node net "b" None in
  send_s net a.conn "b" "plain";
  Alcotest.(check (list string)) "as it is" [ "plain" ] !(b.got);
  Alcotest.(check (list string)) "no header" [ "plain" ] !(b.raw)

(* {1 Key files} *)

let temp () =
  Filename.concat (Filename.get_temp_dir_name ())
    (Printf.sprintf "consort-key-%d-%d" (Unix.getpid ()) (Random.bits ()))

let key_files () =
  let f = temp () in
  Fun.protect
    ~finally:(fun () -> try Sys.remove f with Sys_error _ -> ())
    (fun () ->
      let s = Seal.generate () in
      (match Seal.write_key f s with Ok () -> () | Error e -> Alcotest.fail e);
      Alcotest.(check int) "mode 0600" 0o600 ((Unix.stat f).Unix.st_perm land 0o777);
      (match Seal.write_key f s with Ok () -> Alcotest.fail "overwrote a key" | Error _ -> ());
      (match Seal.read_key f with
      | Ok s' ->
          Alcotest.(check string)
            "read back" (Fmt.str "%a" Seal.pp_secret s) (Fmt.str "%a" Seal.pp_secret s')
      | Error e -> Alcotest.fail e);
      Unix.chmod f 0o644;
      (match Seal.read_key f with
      | Ok _ -> Alcotest.fail "a key others can read was accepted"
      | Error e -> Alcotest.(check bool) "says chmod" true (contains e "chmod 600"));
      Unix.chmod f 0o600;
      let oc = open_out f in
      output_string oc "consort-key-v1:AAAA\n";
      close_out oc;
      (match Seal.read_key f with
      | Ok _ -> Alcotest.fail "a short key was accepted"
      | Error _ -> ());
      let oc = open_out f in
      output_string oc "hello\n";
      close_out oc;
      (match Seal.read_key f with Ok _ -> Alcotest.fail "a non-key was accepted" | Error _ -> ());
      match Seal.read_key (f ^ ".missing") with Ok _ -> Alcotest.fail "no file" | Error _ -> ())

let never_printed () =
  let s = secret 'k' in
  let shown = Fmt.str "%a" Seal.pp_secret s in
  Alcotest.(check bool) "the printer shows no key byte" false (contains shown (String.make 4 'k'));
  Alcotest.(check int) "secret: and 8 hex digits" 15 (String.length shown)

let () =
  Alcotest.run "seal"
    [
      ( "datagrams",
        [
          Alcotest.test_case "Auth round trip" `Quick (round_trip Seal.Auth);
          Alcotest.test_case "Privacy round trip" `Quick (round_trip Seal.Privacy);
          Alcotest.test_case "altered or truncated: dropped" `Quick altered;
          Alcotest.test_case "replayed: dropped" `Quick replayed;
          Alcotest.test_case "the replay window" `Quick window;
          Alcotest.test_case "another secret or mode" `Quick wrong_secret_and_mode;
          Alcotest.test_case "stale" `Quick stale;
          Alcotest.test_case "a clock off: warned, rate-limited" `Quick stale_warned;
          Alcotest.test_case "two groups sharing a key" `Quick groups_apart;
          Alcotest.test_case "a flood of forged senders" `Quick flood;
          Alcotest.test_case "no secret: nothing added" `Quick unsealed_passes;
        ] );
      ( "keys",
        [
          Alcotest.test_case "key files" `Quick key_files;
          Alcotest.test_case "never printed" `Quick never_printed;
        ] );
    ]
