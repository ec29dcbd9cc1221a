(* consortd at its edges (issue 29): what a key promises holds for members
   held by the daemon (Rekey on by default, as in [consort member]), and
   they merge with [consort member --key] members of their group. *)

open Harness
module Wire = Consort_daemon.Wire
module C = Consort_client
module Seal = Consort_seal.Seal
module S = Seal.Make (Consort_engine.Udp)

let check = Alcotest.(check bool)

(* Ports: a window of 50 from 28000, chosen by the process id (test_daemon
   uses 20000-23999, the clients' tests 24000-26999, the chaos 27000-). *)
let base = 28000 + (50 * (Unix.getpid () mod 20))
let addr n = Printf.sprintf "127.0.0.1:%d" (base + n)

let contains s sub =
  let n = String.length sub in
  let rec go i = i + n <= String.length s && (String.sub s i n = sub || go (i + 1)) in
  go 0

let read_file f =
  let ic = open_in_bin f in
  Fun.protect
    ~finally:(fun () -> close_in ic)
    (fun () -> really_input_string ic (in_channel_length ic))

(* The consort command built beside this test. *)
let consort () =
  let here = Filename.dirname Sys.executable_name in
  match
    List.find_opt Sys.file_exists
      [ Filename.concat here "../../bin/main.exe"; "_build/default/bin/main.exe" ]
  with
  | Some p -> p
  | None -> failwith "main.exe not built"

let new_key dir =
  let key = Filename.concat dir "k.key" and secret = Seal.generate () in
  (match Seal.write_key key secret with Ok () -> () | Error e -> Alcotest.fail e);
  (key, secret)

(* The UDP payloads of a pcap file of raw IPv4 records ([--pcap]). *)
let udp_payloads file =
  let s = read_file file in
  let rec go pos acc =
    if pos + 16 > String.length s then List.rev acc
    else
      let incl = Int32.to_int (String.get_int32_le s (pos + 8)) in
      let r = String.sub s (pos + 16) incl in
      let ihl = Char.code r.[0] land 0xf * 4 in
      go (pos + 16 + incl) (String.sub r (ihl + 8) (String.length r - ihl - 8) :: acc)
  in
  go 24 []

let privacy = Result.get_ok (Consort_group.Properties.of_string "vsync,Privacy")

(* A Privacy group held by the daemon, captured (--pcap): with the key file
   alone (what any past holder has, an excluded member included) the side
   channel opens, no payload of the stack does: it goes under view keys. *)
let test_capture_needs_view_keys () =
  let dir = tmpdir () in
  let key, secret = new_key dir in
  let pcap = Filename.concat dir "d.pcap" in
  let d = start ~dir ~args:[ "--key"; key; "--pcap"; pcap ] ~bind:(addr 0) () in
  Fun.protect
    ~finally:(fun () ->
      if alive d then stop d;
      rm_rf dir)
    (fun () ->
      let a = member ~props:privacy d "private" and b = member ~props:privacy d "private" in
      check "a view of two" true
        (until [ a.conn; b.conn ] (fun () -> view_size a = 2 && view_size b = 2));
      let mark = Printf.sprintf "PLAINTEXT-MARK-%d-" (Unix.getpid ()) in
      for i = 1 to 20 do
        check "cast" true (C.cast a.m (mark ^ string_of_int i) = Ok ())
      done;
      check "delivered" true (until [ a.conn; b.conn ] (fun () -> List.length !(b.casts) = 20));
      C.close a.conn;
      C.close b.conn;
      stop d;
      let ds = udp_payloads pcap in
      let held =
        match S.held (S.wrap (Consort_engine.Loop.create ()) (Some (secret, Seal.Privacy))) with
        | Some h -> h
        | None -> Alcotest.fail "no keys"
      in
      let opened = List.filter_map (Seal.open_held held) ds in
      check "the capture holds the casts' datagrams" true (List.length ds > 20);
      check "the key file opens the side channel (the check can read)" true (opened <> []);
      check "no cast opens with the key file alone" false
        (List.exists (fun p -> contains p mark) opened);
      check "stack datagrams sealed under a view key (mode 4)" true
        (List.exists (fun d -> String.length d > 2 && d.[1] = '\004') ds))

(* A member through the daemon and a [consort member --key] process, one
   group: one view of both (before, each stayed alone: one rekeyed, the
   other not). *)
let test_merges_with_member () =
  let dir = tmpdir () in
  let key, _ = new_key dir in
  let mport = base + 20 in
  let d =
    start ~dir
      ~args:[ "--key"; key; "--peers"; Printf.sprintf "127.0.0.1:%d" mport ]
      ~bind:(addr 10) ()
  in
  let log = Filename.concat dir "m.log" in
  let devnull = Unix.openfile "/dev/null" [ Unix.O_RDWR ] 0 in
  let err = Unix.openfile (Filename.concat dir "m.err") [ O_WRONLY; O_CREAT ] 0o600 in
  let pid =
    Unix.create_process (consort ())
      [|
        "consort";
        "member";
        "--group";
        "mixed";
        "--props";
        "vsync,Privacy";
        "--key";
        key;
        "--bind";
        Printf.sprintf "127.0.0.1:%d" mport;
        "--peers";
        String.concat "," (List.init 8 (fun i -> addr (10 + i)));
        "--no-input";
        "--quiet";
        "--log";
        log;
      |]
      devnull devnull err
  in
  Unix.close devnull;
  Unix.close err;
  Fun.protect
    ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
      stop d;
      rm_rf dir)
    (fun () ->
      let a = member ~props:privacy d "mixed" in
      let other () =
        match !(a.views) with
        | v :: _ ->
            Array.exists
              (fun id -> contains id (Printf.sprintf "127.0.0.1:%d#" mport))
              v.Consort_group.Group.members
        | [] -> false
      in
      let merged = until [ a.conn ] (fun () -> view_size a = 2 && other ()) in
      if not merged then
        Alcotest.failf "no view of both; member: %s; daemon: %s"
          (try read_file (Filename.concat dir "m.err") with Sys_error _ -> "")
          (daemon_stderr d);
      check "the member's log names the daemon's member" true
        (until ~timeout:5. [ a.conn ] (fun () ->
             try contains (read_file log) (C.me a.m) with Sys_error _ -> false));
      C.close a.conn)

let deaf =
  {
    Consort_group.Group.view = ignore;
    cast = (fun ~origin:_ _ -> ());
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

(* What the daemon cannot provide is refused at JOIN with its reason: Rekey
   without a key, Rekey with seal.rekey=false; seal.rekey=false alone is
   the explicit way out, as in [consort member]. *)
let test_rekey_refused () =
  let refused ?params d props code word =
    let conn = match C.connect d.socket with Ok c -> c | Error e -> Alcotest.fail e in
    let props = Result.get_ok (Consort_group.Properties.of_string props) in
    (match C.join ~props ?params conn ~group:"r" deaf with
    | Error (C.Refused (c, reason)) ->
        check ("refused: " ^ Wire.code_name code) true (c = code);
        check ("the reason says " ^ word ^ ": " ^ reason) true (contains reason word)
    | Ok _ -> Alcotest.fail "joined"
    | Error e -> Alcotest.failf "%a" C.pp_join_error e);
    C.close conn
  in
  let d = start ~bind:(addr 30) () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf d.dir)
    (fun () -> refused d "vsync,Rekey" Wire.Join_failed "--key");
  let dir = tmpdir () in
  let key, _ = new_key dir in
  let d = start ~dir ~args:[ "--key"; key ] ~bind:(addr 40) () in
  Fun.protect
    ~finally:(fun () ->
      stop d;
      rm_rf dir)
    (fun () ->
      refused ~params:"seal.rekey=false" d "vsync,Privacy,Rekey" Wire.Bad_params "contradict";
      let conn = match C.connect d.socket with Ok c -> c | Error e -> Alcotest.fail e in
      (match C.join ~props:privacy ~params:"seal.rekey=false" conn ~group:"r" deaf with
      | Ok _ -> ()
      | Error e -> Alcotest.failf "seal.rekey=false alone: %a" C.pp_join_error e);
      C.close conn)

let () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  Alcotest.run "daemon_sec"
    [
      ( "rekey",
        [
          Alcotest.test_case "a captured Privacy group needs view keys" `Quick
            test_capture_needs_view_keys;
          Alcotest.test_case "daemon members merge with consort member --key" `Quick
            test_merges_with_member;
          Alcotest.test_case "what the daemon cannot provide is refused at JOIN" `Quick
            test_rekey_refused;
        ] );
    ]
