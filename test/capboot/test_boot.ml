(* The boot server: declarations (order, errors, cycles), and as real
   processes: a file server, a process server and a plain service started in
   dependency order, a killed service restarted, a hung one (SIGSTOP: it
   stops answering std_status) restarted, a failed dependency keeping its
   dependents cold, and SIGTERM stopping everything. *)

module Decl = Consort_capboot.Decl
open Consort_local
open Cap_procs

let here = Filename.dirname Sys.executable_name
let ( / ) = Filename.concat
let read_file p = try read_file p with Sys_error _ -> ""

(* {1 Declarations} *)

let names = List.map (fun (s : Decl.service) -> s.name)

let test_parse () =
  let text =
    {|# a host
service tick
  run sh -c "echo $$HOME; sleep 1" $dir
  after fs
  capability none
  restart on-failure
  backoff 1 8
service fs
  run consort cap fs serve --data "/var/lib/consort fs"
  at 127.0.0.1:7700
service dir
  run consort dir serve
  cap store=$fs
|}
  in
  match Decl.parse text with
  | Error e -> Alcotest.fail e
  | Ok l ->
      Alcotest.(check (list string)) "dependency order" [ "fs"; "dir"; "tick" ] (names l);
      let tick = List.find (fun (s : Decl.service) -> s.name = "tick") l in
      Alcotest.(check (list string)) "implied dependency" [ "dir"; "fs" ] tick.after;
      let caps = function "dir" -> Some "cap1:D" | "fs" -> Some "cap1:F" | _ -> None in
      let args = List.map (fun w -> Result.get_ok (Decl.expand caps w)) tick.run in
      Alcotest.(check (list string)) "words" [ "sh"; "-c"; "echo $HOME; sleep 1"; "cap1:D" ] args;
      Alcotest.(check bool)
        "policy" true
        (tick.restart = Decl.On_failure && tick.backoff = (1., 8.) && not tick.capability);
      let fs = List.find (fun (s : Decl.service) -> s.name = "fs") l in
      Alcotest.(check (list string))
        "quoted"
        [ "consort"; "cap"; "fs"; "serve"; "--data"; "/var/lib/consort fs" ]
        (List.map (fun w -> Result.get_ok (Decl.expand caps w)) fs.run)

(* The example of one host's declarations stays valid. *)
let test_example () =
  (* Beside the built tree (dune's copy), or from the repository's root. *)
  let candidates =
    [
      here / ".." / ".." / "examples" / "boot" / "host.decl";
      "examples/boot/host.decl";
      "../../examples/boot/host.decl";
    ]
  in
  let file =
    Option.value ~default:(List.hd candidates) (List.find_opt Sys.file_exists candidates)
  in
  match Decl.load file with
  | Ok l ->
      Alcotest.(check (list string)) "services" [ "fs"; "proc"; "dir1"; "dir2"; "dir3" ] (names l)
  | Error e -> Alcotest.fail e

let test_errors () =
  let err text expect =
    match Decl.parse ~file:"d" text with
    | Ok _ -> Alcotest.failf "accepted: %S" text
    | Error e ->
        if not (contains e expect) then Alcotest.failf "%S: error %S does not say %S" text e expect;
        if String.contains e '\n' then Alcotest.failf "more than one line: %S" e
  in
  err "service a\n run x\n after b\nservice b\n run y\n after c\nservice c\n run z\n after a\n"
    "cyclic dependencies: a -> b -> c -> a";
  err "service a\n run x $a\n" "cyclic dependencies: a -> a";
  err "service a\n run x\n after nobody\n" "depends on nobody, which is not declared";
  err "service a\n run x\nservice a\n run y\n" "d:3: service a declared twice";
  err "service a\n after b\n" "has no run line";
  err "run x\n" "d:1: \"run\" before any service line";
  err "service A\n" "bad service name";
  err "service a\n run \"x\n" "unterminated quote";
  err "service a\n run x\n backoff 5 1\n" "MIN is above MAX";
  err "service a\n run x\n poll -1\n" "poll";
  err "service a\n run x\n frobnicate\n" "unknown keyword";
  err "service a\n run echo $HOME\n" "write $$ for a $";
  err "service a\n run x\n capability none\nservice b\n run y $a\n" "which has no capability";
  err "" "no service declared";
  err
    (String.concat "" (List.init 65 (fun i -> Printf.sprintf "service s%d\n run x\n" i)))
    "more than 64 services"

(* {1 Processes} *)

let lines s = List.filter (fun l -> l <> "") (String.split_on_char '\n' s)

(* The index of the first line that starts with [prefix]. *)
let index out prefix =
  let rec go i = function
    | [] -> None
    | l :: rest ->
        if String.length l >= String.length prefix && String.sub l 0 (String.length prefix) = prefix
        then Some i
        else go (i + 1) rest
  in
  go 0 (lines out)

let pid_of out name ~nth =
  let starts = List.filter (fun l -> contains l (name ^ " starting pid ")) (lines out) in
  match List.nth_opt starts nth with
  | Some l -> int_of_string (List.nth (String.split_on_char ' ' l) 3)
  | None -> Alcotest.failf "%s started fewer than %d times:\n%s" name (nth + 1) out

let count out l = List.length (List.filter (( = ) l) (lines out))

let test_services () =
  let d = temp_dir "capboot" in
  List.iter (fun x -> Unix.mkdir x 0o700) [ d / "boot"; d / "fs"; d / "ps" ];
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  let fsa = Printf.sprintf "127.0.0.1:%d" (free_port ())
  and psa = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let c = consort () in
  fs_init (d / "fs");
  let decl = d / "decl" in
  write_file decl
    (String.concat "\n"
       [
         "service tick";
         Printf.sprintf "  run sh -c \"echo $$CONSORT_CAPS > %s; exec sleep 600\"" (d / "tick.env");
         "  capability none";
         "  cap files=$fs";
         "  after proc";
         "service proc";
         Printf.sprintf "  run %s cap proc serve --data %s --bind %s --locate %s" c (d / "ps") psa
           fsa;
         "  at " ^ psa;
         "  after fs";
         "  poll 0.3";
         "  backoff 0.2 1";
         "service fs";
         Printf.sprintf "  run %s cap fs serve --data %s --bind %s" c (d / "fs") fsa;
         "  at " ^ fsa;
         "  poll 0.3";
         "  backoff 0.2 1";
         "service broken";
         "  run sh -c \"exit 3\"";
         "  capability none";
         "  restart never";
         "service waiting";
         "  run sleep 600";
         "  capability none";
         "  after broken";
         "";
       ]);
  let out = d / "boot.out" and err = d / "boot.err" in
  let boota = Printf.sprintf "127.0.0.1:%d" (free_port ()) in
  let pid =
    spawn ~out ~err
      [ "cap"; "boot"; "serve"; "--decl"; decl; "--data"; d / "boot"; "--bind"; boota ]
  in
  let stopped = ref false in
  (* On failure: SIGTERM, so that the boot server stops its services. *)
  Fun.protect ~finally:(fun () ->
      if not !stopped then (
        (try Unix.kill pid Sys.sigterm with _ -> ());
        ignore (wait_code pid)))
  @@ fun () ->
  let o () = read_file out in
  eventually "every service up" (fun () -> contains (o ()) "tick up");
  (* Dependency order: each starts only after what it depends on is up. *)
  let at p =
    match index (o ()) p with Some i -> i | None -> Alcotest.failf "no line %S in\n%s" p (o ())
  in
  Alcotest.(check bool) "fs up before proc starts" true (at "fs up" < at "proc starting");
  Alcotest.(check bool) "proc up before tick starts" true (at "proc up" < at "tick starting");
  Alcotest.(check string) "the capability environment" "files\n" (read_file (d / "tick.env"));
  eventually "broken is down" (fun () -> contains (o ()) "broken down exited with code 3");
  Alcotest.(check bool) "its dependent never starts" false (contains (o ()) "waiting starting");
  (* A killed service is restarted, and only it. *)
  let p1 = pid_of (o ()) "proc" ~nth:0 in
  Unix.kill p1 Sys.sigkill;
  eventually "proc restarted" (fun () ->
      count (o ()) (Printf.sprintf "proc up pid %d" p1) = 1
      && List.length (List.filter (fun l -> contains l "proc up pid") (lines (o ()))) = 2);
  Alcotest.(check bool) "told why" true (contains (o ()) "proc restarting killed by SIGKILL");
  Alcotest.(check bool) "the new one is another process" true (pid_of (o ()) "proc" ~nth:1 <> p1);
  Alcotest.(check int)
    "fs untouched" 1
    (List.length (List.filter (fun l -> contains l "fs starting") (lines (o ()))));
  (* A hung service: alive, but it does not answer std_status. *)
  let f1 = pid_of (o ()) "fs" ~nth:0 in
  Unix.kill f1 Sys.sigstop;
  eventually "fs restarted after failed polls" (fun () ->
      List.length (List.filter (fun l -> contains l "fs up pid") (lines (o ()))) = 2);
  Alcotest.(check bool) "told why" true (contains (o ()) "fs restarting std_status failed 3 times");
  (try Unix.kill f1 Sys.sigcont with Unix.Unix_error _ -> ());
  (* std_status on the boot server: every service's state. *)
  let server =
    match lines (o ()) with
    | l :: _ -> List.nth (String.split_on_char ' ' l) 1
    | [] -> Alcotest.fail "no server line"
  in
  let sout = d / "status.out" and serr = d / "status.err" in
  let code = wait_code (spawn ~out:sout ~err:serr [ "cap"; "status"; "--locate"; boota; server ]) in
  let st = read_file sout in
  Alcotest.(check int) ("status: " ^ read_file serr) 0 code;
  List.iter
    (fun l -> if not (contains st l) then Alcotest.failf "status lacks %S:\n%s" l st)
    [
      "consort boot server: 5 services, 3 up";
      "fs up pid";
      "proc up pid";
      "tick up pid";
      "broken down restarts 0 (exited with code 3)";
      "waiting cold restarts 0";
    ];
  (* SIGTERM: everything stops, dependents first. *)
  Unix.kill pid Sys.sigterm;
  Alcotest.(check int) "boot server exits 0" 0 (wait_code pid);
  stopped := true;
  Alcotest.(check bool)
    "tick stopped before proc, proc before fs" true
    (at "tick down stopped" < at "proc down stopped"
    && at "proc down stopped" < at "fs down stopped");
  let pids =
    List.map (fun n -> pid_of (o ()) n ~nth:0) [ "tick" ]
    @ [ pid_of (o ()) "proc" ~nth:1; pid_of (o ()) "fs" ~nth:1 ]
  in
  List.iter
    (fun p ->
      Alcotest.(check bool)
        (Printf.sprintf "pid %d gone" p) true
        (try
           Unix.kill p 0;
           false
         with Unix.Unix_error _ -> true))
    pids

let test_cycle_refused () =
  let d = Filename.temp_file "capboot-cyc" "" in
  write_file d "service a\n run sleep 1\n after b\nservice b\n run sleep 1\n after a\n";
  Fun.protect ~finally:(fun () -> Sys.remove d) @@ fun () ->
  let out = d ^ ".out" and err = d ^ ".err" in
  let pid =
    spawn ~out ~err [ "cap"; "boot"; "serve"; "--decl"; d; "--data"; Filename.get_temp_dir_name () ]
  in
  let code = wait_code pid in
  let e = read_file err in
  Sys.remove out;
  Sys.remove err;
  Alcotest.(check int) "refused" 2 code;
  Alcotest.(check bool)
    ("one clear line: " ^ e) true
    (contains e "cyclic dependencies: a -> b -> a" && List.length (lines e) = 1)

(* A boot server killed with SIGKILL leaves nothing behind: its services get
   SIGTERM when it dies. *)
let test_killed_boot () =
  let d = temp_dir "capboot-k" in
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  write_file (d / "decl") "service s\n run sleep 600\n capability none\n";
  let out = d / "out" and err = d / "err" in
  let pid = spawn ~out ~err [ "cap"; "boot"; "serve"; "--decl"; d / "decl"; "--data"; d ] in
  eventually "s up" (fun () -> contains (read_file out) "s up");
  let s = pid_of (read_file out) "s" ~nth:0 in
  Unix.kill pid Sys.sigkill;
  ignore (wait_code pid);
  eventually "the service gone with its boot server" (fun () ->
      try
        Unix.kill s 0;
        false
      with Unix.Unix_error _ -> true)

let () =
  Alcotest.run "capboot"
    [
      ( "declarations",
        [
          Alcotest.test_case "parse" `Quick test_parse;
          Alcotest.test_case "example" `Quick test_example;
          Alcotest.test_case "errors" `Quick test_errors;
        ] );
      ( "boot server",
        [
          Alcotest.test_case "cycle refused" `Quick test_cycle_refused;
          Alcotest.test_case "services" `Quick test_services;
          Alcotest.test_case "boot server killed" `Quick test_killed_boot;
        ] );
    ]
