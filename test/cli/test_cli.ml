(* Every command of the consort command line, walked with bad arguments:
   each must refuse in one line with the documented exit status (see
   Consort_cli), never with an exception, a backtrace or by running on.

   The commands are found by reading the help pages, so that a command
   added later without its row in [cases] fails [every command has
   cases]; every numeric option found on a help page is also given a
   negative value, which must be refused when the command line is read. *)

(* The binary beside this test in the build tree, wherever it is run from. *)
let exe =
  let dir = Filename.dirname Sys.executable_name in
  let dir = if Filename.is_relative dir then Filename.concat (Sys.getcwd ()) dir else dir in
  Filename.concat dir "../../bin/main.exe"

type result = { code : int; out : string; err : string }

(* Runs [exe args] with standard input from /dev/null, killing it after
   [limit] seconds (a command that runs on is a failure). *)
let run ?(exe = exe) ?(limit = 20.) args =
  let tmp_out = Filename.temp_file "cli" ".out" and tmp_err = Filename.temp_file "cli" ".err" in
  let fd_out = Unix.openfile tmp_out [ O_WRONLY; O_TRUNC ] 0o600 in
  let fd_err = Unix.openfile tmp_err [ O_WRONLY; O_TRUNC ] 0o600 in
  let fd_in = Unix.openfile "/dev/null" [ O_RDONLY ] 0 in
  let pid = Unix.create_process exe (Array.of_list (exe :: args)) fd_in fd_out fd_err in
  List.iter Unix.close [ fd_in; fd_out; fd_err ];
  let deadline = Unix.gettimeofday () +. limit in
  let rec wait () =
    match Unix.waitpid [ WNOHANG ] pid with
    | 0, _ ->
        if Unix.gettimeofday () > deadline then (
          Unix.kill pid Sys.sigkill;
          ignore (Unix.waitpid [] pid);
          -1)
        else (
          Unix.sleepf 0.02;
          wait ())
    | _, WEXITED c -> c
    | _, (WSIGNALED _ | WSTOPPED _) -> -2
  in
  let code = wait () in
  let read f =
    let ic = open_in_bin f in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    Sys.remove f;
    s
  in
  { code; out = read tmp_out; err = read tmp_err }

let lines s = String.split_on_char '\n' s |> List.filter (fun l -> String.trim l <> "")

let contains s sub =
  let n = String.length s and m = String.length sub in
  let rec go i = i + m <= n && (String.sub s i m = sub || go (i + 1)) in
  go 0

let show args = String.concat " " ("consort" :: args)

(* No trace of a defect on either stream. *)
let no_defect args r =
  List.iter
    (fun bad ->
      if contains r.err bad || contains r.out bad then
        Alcotest.failf "%s: %S in its output:\n%s%s" (show args) bad r.out r.err)
    [ "exception"; "Exception"; "internal error"; "Fatal error"; "Raised at"; "Called from" ];
  if r.code = -1 then Alcotest.failf "%s: still running after its time limit" (show args);
  if r.code = -2 then Alcotest.failf "%s: killed by a signal" (show args);
  if r.code = 125 then Alcotest.failf "%s: exit 125 (internal error):\n%s" (show args) r.err

(* {1 The commands, from the help pages} *)

(* The COMMANDS section of a help page: each entry's name, and whether it
   is itself a group ("NAME COMMAND ..."). *)
let subcommands path =
  let r = run (path @ [ "--help=plain" ]) in
  if r.code <> 0 then Alcotest.failf "%s --help: exit %d" (show path) r.code;
  let in_section = ref false in
  List.filter_map
    (fun l ->
      if String.length l > 0 && l.[0] <> ' ' then (
        in_section := l = "COMMANDS";
        None)
      else if !in_section && String.length l > 7 && String.sub l 0 7 = "       " && l.[7] <> ' '
      then
        match String.split_on_char ' ' (String.trim l) with
        | name :: rest when name <> "" && name.[0] >= 'a' && name.[0] <= 'z' ->
            Some (name, List.mem "COMMAND" rest)
        | _ -> None
      else None)
    (String.split_on_char '\n' r.out)

let rec leaves path =
  List.concat_map
    (fun (name, group) -> if group then leaves (path @ [ name ]) else [ path @ [ name ] ])
    (subcommands path)

(* The options of a leaf whose value is a number: "--name=DOCV (absent=NUM)"
   or a required one with a numeric DOCV. *)
let numeric_options ?exe path =
  let r = run ?exe (path @ [ "--help=plain" ]) in
  let re_num s = match float_of_string_opt s with Some _ -> true | None -> false in
  String.split_on_char '\n' r.out
  |> List.filter_map (fun l ->
         let l = String.trim l in
         if String.length l < 3 || String.sub l 0 2 <> "--" then None
         else
           match String.index_opt l '=' with
           | None -> None
           | Some eq -> (
               let name = String.sub l 0 eq in
               let rest = String.sub l (eq + 1) (String.length l - eq - 1) in
               let docv, tail =
                 match String.index_opt rest ' ' with
                 | Some sp -> (String.sub rest 0 sp, String.sub rest sp (String.length rest - sp))
                 | None -> (rest, "")
               in
               let absent =
                 match String.index_opt tail '=' with
                 | Some i when contains tail "(absent=" ->
                     let v = String.sub tail (i + 1) (String.length tail - i - 1) in
                     Some
                       (String.sub v 0 (try String.index v ')' with Not_found -> String.length v))
                 | _ -> None
               in
               let numeric_docv =
                 List.mem docv [ "N"; "BYTES"; "SECONDS"; "MB"; "PORT"; "I"; "R" ]
               in
               match absent with
               | Some v when re_num v && name <> "--seed" -> Some name
               | None when numeric_docv && name <> "--seed" -> Some name
               | _ -> None))
  |> List.sort_uniq compare

(* {1 The cases} *)

let tmp = Filename.get_temp_dir_name ()
let existing = "/etc/hostname"
let missing = Filename.concat tmp "consort-cli-no-such-dir/x"
let bad_cap = "cap1:AAAA"

(* For each leaf: arguments that make a complete, valid command line (so
   that a numeric option's error is the one reported), and bad invocations
   with the exit status they must give: 2 refused at run time, 124 refused
   when the command line is read. *)
let cases : (string list * string list * (string list * int) list) list =
  [
    ([ "bench"; "checksum" ], [], []);
    ([ "bench"; "dir" ], [], [ ([ "--clients"; "0" ], 124); ([ "--seconds"; "0" ], 124) ]);
    ([ "bench"; "failover" ], [], [ ([ "--params"; "no.such=1" ], 2) ]);
    ([ "bench"; "fs" ], [], [ ([ "--size"; "0" ], 124) ]);
    ([ "bench"; "join" ], [], [ ([ "--sizes"; "x" ], 124) ]);
    ([ "bench"; "kv" ], [], [ ([ "--clients"; "0" ], 124); ([ "--seconds"; "1" ], 124) ]);
    ([ "bench"; "layering" ], [], [ ([ "--iterations"; "0" ], 124) ]);
    ( [ "bench"; "membership" ],
      [],
      [
        ([ "--rounds"; "0" ], 124);
        ([ "--params"; "no.such=1" ], 2);
        ([ "--consort"; "no-path" ], 2);
        ([ "--consort"; "old=" ^ missing ], 2);
        ([ "--consort"; "a=" ^ existing ], 2);
        ([ "--consort"; "a=/bin/true"; "--consort"; "a=/bin/true" ], 2);
        ([ "--save"; missing ], 2);
      ] );
    ( [ "bench"; "peer" ],
      [ "--index"; "0"; "--addrs"; "127.0.0.1:1,127.0.0.1:2"; "--kind"; "rtt" ],
      [ ([ "--index"; "0"; "--addrs"; "nonsense"; "--kind"; "rtt" ], 2) ] );
    ([ "bench"; "rpc" ], [], [ ([ "--calls"; "0" ], 124) ]);
    ([ "bench"; "proc" ], [], [ ([ "--rounds"; "0" ], 124) ]);
    ([ "bench"; "rtt" ], [], [ ([ "--params"; "no.such=1" ], 2) ]);
    ( [ "bench"; "scale" ],
      [ "--sizes"; "2" ],
      [ ([ "--sizes"; "0" ], 124); ([ "--params"; "no.such=1" ], 2) ] );
    ( [ "bench"; "tcp" ],
      [],
      [
        ([ "--mtu"; "0" ], 124);
        ([ "--impair"; "colour=red" ], 2);
        ([ "--impair"; "loss=2" ], 2);
        ([ "--impair"; "loss=2%"; "--save"; missing ], 2);
        ([ "--impair"; "loss=2%"; "--consort-cc"; "fast" ], 124);
      ] );
    ([ "bench"; "tcp-sim" ], [], [ ([ "--connections"; "0" ], 124) ]);
    ( [ "bench"; "throughput" ],
      [],
      [ ([ "--params"; "no.such=1" ], 2); ([ "--members"; "0" ], 124) ] );
    ([ "cap"; "boot"; "check" ], [ existing ], [ ([ missing ], 2); ([ existing ], 2) ]);
    ( [ "cap"; "boot"; "serve" ],
      [ "--decl"; missing; "--data"; tmp ],
      [ ([ "--decl"; missing; "--data"; tmp ], 2); ([ "--decl"; existing; "--data"; tmp ], 2) ] );
    ( [ "cap"; "boot"; "status" ],
      [ "--data"; missing ],
      [ ([ "--data"; missing ], 2); ([ "not-a-cap" ], 2); ([], 2); ([ "--data"; tmp; bad_cap ], 2) ]
    );
    ([ "cap"; "destroy" ], [ bad_cap ], [ ([ "not-a-cap" ], 2); ([ bad_cap ], 2) ]);
    ( [ "cap"; "chmod" ],
      [ "/a"; "all" ],
      [ ([ "/a"; "all"; "--root"; "not-a-cap" ], 2); ([ "/a"; "bogus"; "--root"; bad_cap ], 2) ] );
    ( [ "cap"; "dir"; "gc" ],
      [ "--server"; bad_cap ],
      [ ([ "--server"; "not-a-cap" ], 2); ([ "--server"; bad_cap; "--rounds"; "0" ], 124) ] );
    ( [ "cap"; "dir"; "link" ],
      [ "/a"; bad_cap ],
      [ ([ "/a"; "not-a-cap" ], 2); ([ "/a"; bad_cap; "--root"; "not-a-cap" ], 2) ] );
    ([ "cap"; "dir"; "lookup" ], [ "/a" ], [ ([ "/a"; "--root"; "not-a-cap" ], 2) ]);
    ( [ "cap"; "dir"; "serve" ],
      [ "--data"; missing; "--group"; "127.0.0.1:1" ],
      [
        ([ "--data"; "/proc/1/consort"; "--group"; "127.0.0.1:1" ], 2);
        ([ "--data"; tmp; "--key"; existing; "--group"; "127.0.0.1:1" ], 2);
      ] );
    ( [ "cap"; "dir"; "init" ],
      [ "--data"; missing; "--new" ],
      [
        ([ "--data"; "/proc/1/consort"; "--new" ], 2);
        ([ "--data"; tmp; "--key"; existing; "--join" ], 2);
        ([ "--data"; missing ], 124);
        ([ "--data"; missing; "--new"; "--join" ], 124);
      ] );
    ([ "cap"; "ls" ], [ "/" ], [ ([ "/"; "--root"; "not-a-cap" ], 2) ]);
    ([ "cap"; "cat" ], [ "/a" ], [ ([ "/a"; "--root"; "not-a-cap" ], 2); ([], 124) ]);
    ( [ "cap"; "get" ],
      [ "/a" ],
      [ ([ "/a"; "--root"; "not-a-cap" ], 2); ([ "/a"; "x"; "--root"; bad_cap ], 2) ] );
    ( [ "cap"; "put" ],
      [ existing; "/a" ],
      [
        ([ existing; "/a"; "--root"; "not-a-cap" ], 2); ([ existing; "/a"; "--masks"; "bogus" ], 2);
      ] );
    ([ "cap"; "shell" ], [], [ ([ "--root"; "not-a-cap" ], 2) ]);
    ([ "cap"; "demo" ], [], [ ([ "--timeout"; "0" ], 124) ]);
    ( [ "cap"; "mkdir" ],
      [ "/a" ],
      [ ([ "/a"; "--root"; "not-a-cap" ], 2); ([ "/"; "--root"; bad_cap ], 2) ] );
    ( [ "cap"; "rm" ],
      [ "/a" ],
      [ ([ "/a"; "--root"; "not-a-cap" ], 2); ([ "/"; "--root"; bad_cap ], 2) ] );
    ( [ "cap"; "fs"; "fsck" ],
      [ "--data"; missing ],
      [ ([ "--data"; missing ], 2); ([ "--data"; existing ], 2) ] );
    ( [ "cap"; "fs"; "get" ],
      [ bad_cap ],
      [ ([ "not-a-cap" ], 2); ([ "cap1:" ^ String.make 40 'A' ], 2) ] );
    ( [ "cap"; "fs"; "put" ],
      [ "--server"; bad_cap; existing ],
      [ ([ "--server"; "x"; existing ], 2); ([ "--server"; bad_cap; missing ], 2) ] );
    ( [ "cap"; "fs"; "serve" ],
      [ "--data"; missing ],
      [
        ([ "--data"; "/proc/1/consort" ], 2);
        ([ "--data"; tmp; "--key"; missing ], 2);
        ([ "--data"; missing ], 2);
        ([ "--new"; "--data"; tmp ], 2);
      ] );
    ( [ "cap"; "fs"; "init" ],
      [ "--data"; missing ],
      [ ([ "--data"; "/proc/1/consort" ], 2); ([ "--data"; tmp ], 2) ] );
    ([ "cap"; "fs"; "revoke" ], [ bad_cap ], [ ([ "not-a-cap" ], 2); ([ bad_cap ], 2) ]);
    ([ "cap"; "fs"; "size" ], [ bad_cap ], [ ([ "not-a-cap" ], 2) ]);
    ([ "cap"; "info" ], [ bad_cap ], [ ([ "not-a-cap" ], 2) ]);
    ( [ "cap"; "restrict" ],
      [ bad_cap; "--rights"; "read" ],
      [ ([ "not-a-cap"; "--rights"; "read" ], 2) ] );
    ([ "cap"; "status" ], [ bad_cap ], [ ([ "not-a-cap" ], 2) ]);
    ( [ "cap"; "exec" ],
      [ bad_cap; bad_cap ],
      [
        ([ "not-a-cap"; bad_cap ], 2);
        ([ bad_cap; "x" ], 2);
        ([ "--cpu"; "0"; bad_cap; bad_cap ], 124);
      ] );
    ( [ "cap"; "agent" ],
      [ "--socket"; missing ],
      [ ([ "--socket"; missing ], 2); ([ "--socket"; "/etc/consort-agent.sock" ], 2) ] );
    ([ "cap"; "kill" ], [ bad_cap ], [ ([ "not-a-cap" ], 2); ([ bad_cap; "--signal"; "NOPE" ], 2) ]);
    ( [ "cap"; "proc"; "serve" ],
      [ "--data"; missing ],
      [
        ([ "--data"; "/proc/1/consort" ], 2);
        ([ "--data"; tmp; "--key"; missing ], 2);
        ([ "--data"; tmp; "--user"; "root" ], 2);
        ([ "--data"; tmp; "--user"; "0:0" ], 2);
        ([ "--data"; tmp; "--user"; "no-such-user-here" ], 2);
      ] );
    ([ "cap"; "ps" ], [ bad_cap ], [ ([ "not-a-cap" ], 2) ]);
    ( [ "check-logs" ],
      [ existing ],
      [ ([ missing ], 2); ([ existing ], 2); ([ "/proc/self/mem" ], 2) ] );
    ([ "check" ], [ existing ], [ ([ missing ], 2); ([ existing ], 2) ]);
    ([ "demo" ], [], [ ([ "--limit"; "0" ], 124) ]);
    ([ "keygen" ], [ missing ], [ ([ missing ], 2); ([ existing ], 2) ]);
    ( [ "kv"; "cas" ],
      [ "k"; "a"; "b"; "--servers"; "127.0.0.1:1" ],
      [ ([ "k"; "a"; "b"; "--servers"; "bad" ], 2) ] );
    ([ "kv"; "check" ], [ existing ], [ ([ missing ], 2); ([ existing ], 2) ]);
    ([ "kv"; "del" ], [ "k"; "--servers"; "127.0.0.1:1" ], [ ([ "k"; "--servers"; "bad" ], 2) ]);
    ( [ "kv"; "get" ],
      [ "k"; "--servers"; "127.0.0.1:1" ],
      [ ([ "k"; "--servers"; "bad" ], 2); ([ "k"; "--servers"; "127.0.0.1:99999" ], 2) ] );
    ( [ "kv"; "put" ],
      [ "k"; "v"; "--servers"; "127.0.0.1:1" ],
      [ ([ "k"; "v"; "--servers"; "bad" ], 2) ] );
    ( [ "kv"; "serve" ],
      [ "--group"; "g"; "--data"; missing; "--bind"; "127.0.0.1:1"; "--listen"; "127.0.0.1:2" ],
      [
        ( [ "--group"; "g"; "--data"; missing; "--bind"; "127.0.0.1:7"; "--listen"; "127.0.0.1:8" ],
          2 );
        ([ "--group"; "g"; "--data"; tmp; "--bind"; "nowhere"; "--listen"; "127.0.0.1:8" ], 2);
      ] );
    ([ "kv"; "shell" ], [ "--servers"; "127.0.0.1:1" ], [ ([ "--servers"; "bad" ], 2) ]);
    ( [ "mcast-peer" ],
      [ "--rank"; "0"; "--members"; "127.0.0.1:1,127.0.0.1:2" ],
      [
        ([ "--rank"; "0"; "--members"; "nonsense" ], 2);
        ([ "--rank"; "0"; "--members"; "127.0.0.1:1"; "--loss"; "2" ], 124);
      ] );
    ( [ "member" ],
      [ "--group"; "g" ],
      [
        ([ "--group"; "g"; "--bind"; "999.1.1.1:5" ], 2);
        ([ "--group"; "g"; "--bind"; "192.0.2.1:5000" ], 2);
        ([ "--group"; "g"; "--key"; missing ], 2);
        ([ "--group"; "g"; "--log"; missing ], 2);
        ([ "--group"; "g"; "--params"; "no.such=1" ], 2);
        ([ "--group"; "g"; "--peers"; "bad" ], 2);
        ([ "--group"; "g"; "--props"; "Bogus" ], 124);
        (* Properties this command cannot use: refused with the reason. *)
        ([ "--group"; "g"; "--props"; "vsync,Migrate" ], 2);
        ([ "--group"; "g"; "--props"; "vsync,Total,Cltsvr" ], 2);
      ] );
    ( [ "net"; "up" ],
      [ "--tap"; "consort-none"; "--ip"; "10.9.0.2/24" ],
      [ ([ "--tap"; "consort-none"; "--ip"; "nonsense" ], 2) ] );
    ([ "params" ], [], []);
    ( [ "sim" ],
      [ "--scenario"; "vsync-crash" ],
      [
        ([ "--scenario"; "no-such" ], 2);
        ([ "--scenario"; "vsync-crash"; "--params"; "no.such=1" ], 2);
      ] );
    ([ "stack" ], [], [ ([ "--props"; "Bogus" ], 124) ]);
    ( [ "status" ],
      [ "--control"; missing ],
      [ ([ "--control"; missing ], 2); ([ "--control"; existing ], 2) ] );
    ([ "counters" ], [ "--control"; missing ], [ ([ "--control"; missing ], 2) ]);
    ( [ "cast" ],
      [ "--control"; missing; "x" ],
      [ ([ "--control"; missing; "x" ], 2); ([ "--control"; missing; "two\nlines" ], 2) ] );
    ( [ "send" ],
      [ "--control"; missing; "id"; "x" ],
      [ ([ "--control"; missing; "id"; "x" ], 2); ([ "--control"; missing; "a b"; "x" ], 2) ] );
    ( [ "member" ],
      [ "--group"; "g"; "--control"; missing ],
      [
        ([ "--group"; "g"; "--bind"; "127.0.0.1:7479"; "--control"; missing ], 2);
        ([ "--group"; "g"; "--bind"; "127.0.0.1:7479"; "--metrics"; "nowhere" ], 2);
        ([ "--group"; "g"; "--bind"; "127.0.0.1:7479"; "--metrics"; "0.0.0.0:7478" ], 2);
      ] );
  ]

let find path = List.find_opt (fun (p, _, _) -> p = path) cases

(* Internal commands, started by the demo and the benchmarks: they exist
   but are left out of their parent's list of commands. *)
let hidden = [ [ "mcast-peer" ]; [ "bench"; "peer" ] ]

(* {1 The tests} *)

let every_command_has_cases () =
  let all = leaves [] in
  if List.length all < 20 then
    Alcotest.failf "only %d commands found in the help pages" (List.length all);
  List.iter
    (fun path ->
      if find path = None then Alcotest.failf "%s has no row in the CLI test's cases" (show path))
    all;
  List.iter
    (fun (p, _, _) ->
      if List.mem p hidden then (
        if List.mem p all then Alcotest.failf "%s is internal but listed in the help" (show p))
      else if not (List.mem p all) then
        Alcotest.failf "%s is in the cases but not in the help" (show p))
    cases

(* A refusal at run time: exit 2 and one line on standard error that
   names the command. *)
let check_refused path args expected =
  let args = path @ args in
  let r = run args in
  no_defect args r;
  if r.code <> expected then
    Alcotest.failf "%s: exit %d, expected %d\n%s%s" (show args) r.code expected r.out r.err;
  (* The key-value client commands answer on standard output, one line
     ("error: REASON"), as their documented form says. *)
  let err =
    match (lines r.err, lines r.out) with
    | [], [ l ] when String.length l > 6 && String.sub l 0 6 = "error:" -> [ l ]
    | e, _ -> e
  in
  if expected = 2 then
    match err with
    | [ l ] ->
        if not (String.length l > 7 && (String.sub l 0 7 = "consort" || String.sub l 0 6 = "error:"))
        then Alcotest.failf "%s: the error does not say which command: %S" (show args) l
    | [] -> Alcotest.failf "%s: exit 2 without a word on standard error" (show args)
    | l ->
        Alcotest.failf "%s: %d lines on standard error, expected one:\n%s" (show args)
          (List.length l) r.err
  else if err = [] then
    Alcotest.failf "%s: exit %d without a word on standard error" (show args) r.code

let bad_arguments () =
  List.iter
    (fun (path, _, bad) -> List.iter (fun (args, code) -> check_refused path args code) bad)
    cases

let unknown_option () =
  List.iter
    (fun (path, base, _) ->
      let args = path @ base @ [ "--no-such-option" ] in
      let r = run args in
      no_defect args r;
      if r.code <> 124 then Alcotest.failf "%s: exit %d, expected 124" (show args) r.code;
      if not (contains r.err "unknown option") then Alcotest.failf "%s: %S" (show args) r.err)
    cases

let negative_numbers () =
  let checked = ref 0 in
  List.iter
    (fun (path, base, _) ->
      List.iter
        (fun opt ->
          let args = path @ base @ [ opt ^ "=-1" ] in
          let r = run args in
          no_defect args r;
          incr checked;
          (* Refused when read (124), or at once with a line naming it (2). *)
          if r.code <> 124 && r.code <> 2 then
            Alcotest.failf "%s: exit %d, expected 124 or 2\n%s%s" (show args) r.code r.out r.err;
          let bare = String.sub opt 2 (String.length opt - 2) in
          if not (contains r.err bare) then
            Alcotest.failf "%s: the error does not name %s: %S" (show args) opt r.err)
        (numeric_options path))
    cases;
  if !checked < 30 then Alcotest.failf "only %d numeric options found" !checked

let help_everywhere () =
  List.iter
    (fun (path, _, _) ->
      let r = run (path @ [ "--help=plain" ]) in
      if r.code <> 0 then Alcotest.failf "%s --help: exit %d" (show path) r.code;
      (* The documented convention, not cmdliner's default list. *)
      if not (contains r.out "EXIT STATUS" && contains r.out "refused") then
        Alcotest.failf "%s --help does not document the exit statuses" (show path);
      (* An EXAMPLES section with at least one command line of this command. *)
      match String.split_on_char '\n' r.out |> List.map String.trim with
      | ls ->
          let rec after = function
            | [] -> []
            | "EXAMPLES" :: rest -> rest
            | _ :: rest -> after rest
          in
          let ex = after ls in
          let prefix = show path in
          if
            not
              (List.exists
                 (fun l ->
                   String.length l >= String.length prefix
                   && String.sub l 0 (String.length prefix) = prefix
                   || contains l ("| " ^ prefix))
                 ex)
          then
            Alcotest.failf "%s --help has no EXAMPLES section with a %s command line" (show path)
              prefix)
    cases

(* {1 Properties and scenarios: the lists users read, built from the code} *)

(* The scenarios [consort sim] runs, from its refusal of an unknown one. *)
let scenario_names () =
  let r = run [ "sim"; "--scenario"; "no-such" ] in
  let marker = "(known: " in
  let rec find i =
    if i + String.length marker > String.length r.err then Alcotest.failf "no known list: %S" r.err
    else if String.sub r.err i (String.length marker) = marker then i + String.length marker
    else find (i + 1)
  in
  let start = find 0 in
  let stop = String.index_from r.err start ')' in
  String.sub r.err start (stop - start) |> String.split_on_char ',' |> List.map String.trim

let sim_help_lists_every_scenario () =
  let names = scenario_names () in
  List.iter
    (fun n -> if not (List.mem n names) then Alcotest.failf "consort sim does not know %s" n)
    [ "vsync-crash"; "fs-crash"; "kv-linearizable" ];
  let help = run [ "sim"; "--help=plain" ] in
  (* Help wraps lines: compare words. *)
  let words =
    String.split_on_char '\n' help.out
    |> List.concat_map (String.split_on_char ' ')
    |> List.map (fun w ->
           String.trim w |> fun w ->
           if w <> "" && (w.[String.length w - 1] = ',' || w.[String.length w - 1] = '.') then
             String.sub w 0 (String.length w - 1)
           else w)
  in
  List.iter
    (fun n ->
      if not (List.mem n words) then Alcotest.failf "consort sim --help does not list scenario %s" n)
    names

(* [consort stack --list]: each property, and whether it is built. *)
let properties () =
  let r = run [ "stack"; "--list" ] in
  if r.code <> 0 then Alcotest.failf "consort stack --list: exit %d" r.code;
  List.map
    (fun l ->
      match String.index_opt l ' ' with
      | Some i -> (String.sub l 0 i, not (contains l "not available"))
      | None -> Alcotest.failf "consort stack --list: %S" l)
    (lines r.out)

let stack_knows_every_property () =
  let ps = properties () in
  (* Seed 000's Table 1. *)
  List.iter
    (fun n ->
      if not (List.mem_assoc n ps) then Alcotest.failf "consort stack --list does not know %s" n)
    [
      "Agree";
      "Auth";
      "Causal";
      "Cltsvr";
      "Debug";
      "Evs";
      "Flow";
      "Frag";
      "Gmp";
      "Heal";
      "Migrate";
      "Privacy";
      "Rekey";
      "Scale";
      "Suspect";
      "Switch";
      "Sync";
      "Total";
      "Xfer";
      "Primary";
    ];
  List.iter
    (fun (n, available) ->
      (* With Total: some properties need it (Cltsvr). *)
      let args = [ "stack"; "--props"; "vsync,Total," ^ n ] in
      let r = run args in
      no_defect args r;
      if available then (
        if r.code <> 0 then Alcotest.failf "%s: exit %d\n%s" (show args) r.code r.err;
        (* One line per layer, top first, down to bottom. *)
        let ls = lines r.out in
        if List.length ls < 5 then Alcotest.failf "%s: %d lines" (show args) (List.length ls);
        List.iter
          (fun l ->
            if String.contains (List.hd (String.split_on_char ' ' l)) ':' then
              Alcotest.failf "%s: not one layer a line: %S" (show args) l)
          ls;
        let last = List.nth ls (List.length ls - 1) in
        if not (String.length last >= 6 && String.sub last 0 6 = "bottom") then
          Alcotest.failf "%s: ends with %S" (show args) last)
      else (
        if r.code <> 2 then
          Alcotest.failf "%s: exit %d, expected 2 (not available)" (show args) r.code;
        match lines r.err with
        | [ l ] when contains l "not available" && contains l n -> ()
        | _ -> Alcotest.failf "%s: %S" (show args) r.err))
    ps;
  (* A set that cannot work: refused, saying why. *)
  List.iter
    (fun (props, why) ->
      let args = [ "stack"; "--props"; props ] in
      let r = run args in
      no_defect args r;
      if r.code <> 2 then Alcotest.failf "%s: exit %d, expected 2" (show args) r.code;
      match lines r.err with
      | [ l ] when contains l why -> ()
      | _ -> Alcotest.failf "%s: %S" (show args) r.err)
    [
      ("Total", "needs Gmp");
      ("Sync", "needs Gmp");
      ("Heal,Frag", "needs Gmp");
      ("Frag,Auth,Switch", "Switch needs Gmp");
      ("vsync,Cltsvr", "Cltsvr needs Total");
    ]

(* The README's table of properties: a row for every property, and every
   scenario it names runs. *)
let readme_table () =
  let readme =
    let dir = Filename.dirname Sys.executable_name in
    let dir = if Filename.is_relative dir then Filename.concat (Sys.getcwd ()) dir else dir in
    let f = Filename.concat dir "../../README.md" in
    let ic = open_in_bin f in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    s
  in
  let rec table = function
    | [] ->
        Alcotest.fail
          "README.md has no table of properties (a line \"| property | guarantees | checked by |\")"
    | l :: rest when String.trim l = "| property | guarantees | checked by |" -> (
        match rest with
        | _sep :: rows ->
            List.filter
              (fun l -> String.length l > 0 && l.[0] = '|')
              (let rec take = function
                 | l :: r when String.length l > 0 && l.[0] = '|' -> l :: take r
                 | _ -> []
               in
               take rows)
        | [] -> [])
    | _ :: rest -> table rest
  in
  let rows = table (String.split_on_char '\n' readme) in
  (* The words in backquotes of a cell. *)
  let quoted cell =
    match String.split_on_char '`' cell with
    | [] | [ _ ] -> []
    | _ :: rest -> List.filteri (fun i _ -> i mod 2 = 0) rest
  in
  let scenarios = scenario_names () in
  let ps = properties () in
  let seen =
    List.map
      (fun row ->
        match String.split_on_char '|' row with
        | _ :: p :: guarantee :: checked :: _ ->
            let name =
              match quoted p with
              | n :: _ -> n
              | [] -> Alcotest.failf "README row without a property: %S" row
            in
            let available =
              match List.assoc_opt name ps with
              | Some a -> a
              | None ->
                  Alcotest.failf "README lists %s, which consort stack --list does not know" name
            in
            let named = List.filter (fun w -> not (String.contains w '=')) (quoted checked) in
            (* A property not built yet may name the scenario that will
               check it; one that is built names scenarios that exist. *)
            if available then
              List.iter
                (fun s ->
                  if not (List.mem s scenarios) then
                    Alcotest.failf
                      "README: %s is checked by %S, which is no scenario of consort sim" name s)
                named;
            if available && named = [] then
              Alcotest.failf "README: %s names no scenario that checks it" name;
            if (not available) && not (contains guarantee "not available") then
              Alcotest.failf "README: %s is not available, its row says otherwise" name;
            name
        | _ -> Alcotest.failf "README row: %S" row)
      rows
  in
  List.iter
    (fun (n, _) ->
      if not (List.mem n seen) then
        Alcotest.failf "README's table of properties has no row for %s" n)
    ps

(* {1 consortd} *)

let consortd = Filename.concat (Filename.dirname (Filename.dirname exe)) "bin/consortd/consortd.exe"

(* A Unix socket file nobody listens on: a daemon that died. *)
let dead_socket () =
  let path = Filename.concat tmp (Printf.sprintf "consort-cli-dead-%d.sock" (Unix.getpid ())) in
  (try Sys.remove path with Sys_error _ -> ());
  let s = Unix.socket Unix.PF_UNIX Unix.SOCK_STREAM 0 in
  Unix.bind s (Unix.ADDR_UNIX path);
  Unix.close s;
  path

(* A base that would start a daemon; each bad invocation must be refused
   before it serves: exit 2 and one line naming consortd, 124 when the
   command line cannot be read. *)
let consortd_cases () =
  let sock = Filename.concat tmp (Printf.sprintf "consort-cli-d-%d.sock" (Unix.getpid ())) in
  let base = [ "--socket"; sock ] in
  let cases =
    [
      ([], 2);
      ([ "--socket"; missing ], 2);
      ([ "--socket"; existing ], 2);
      ([ "--socket"; "/proc/consort.sock" ], 2);
      (base @ [ "--bind"; "nonsense" ], 2);
      (base @ [ "--bind"; "0.0.0.0:7500" ], 2);
      (base @ [ "--bind"; "239.1.2.3:7500" ], 2);
      (base @ [ "--bind"; "192.0.2.1:7500" ], 2);
      (base @ [ "--bind"; "127.0.0.1:0" ], 2);
      (base @ [ "--bind"; "127.0.0.1:65530"; "--ports"; "10" ], 2);
      (base @ [ "--peers"; "bad" ], 2);
      (base @ [ "--peers"; "127.0.0.1:9-1" ], 2);
      (base @ [ "--key"; missing ], 2);
      (base @ [ "--key"; existing ], 2);
      (base @ [ "--tcp"; "10.0.0.1:80" ], 2);
      (base @ [ "--tcp"; "nonsense" ], 2);
      (base @ [ "--control"; missing ], 2);
      (base @ [ "--metrics"; "nowhere" ], 2);
      (base @ [ "--metrics"; "0.0.0.0:9" ], 2);
      (base @ [ "--socket-mode"; "999" ], 2);
      (base @ [ "--socket-mode"; "rw" ], 2);
      (base @ [ "--allow-uid"; "no-such-user-here" ], 2);
      (base @ [ "--allow-gid=-3" ], 2);
      (base @ [ "--token"; missing ], 2);
      (base @ [ "--token"; existing ], 2);
      (base @ [ "--pcap"; existing ], 2);
      (base @ [ "--pcap"; missing ], 2);
      (base @ [ "--max-frame"; "10" ], 2);
      (base @ [ "--hello-timeout"; "0" ], 2);
      (base @ [ "--log-level"; "nonsense" ], 124);
      (base @ [ "--log-format"; "xml" ], 124);
      (base @ [ "--ports"; "many" ], 124);
    ]
  in
  List.iter
    (fun (args, expected) ->
      let r = run ~exe:consortd ~limit:10. args in
      let args = "consortd" :: args in
      no_defect args r;
      if r.code <> expected then
        Alcotest.failf "%s: exit %d, expected %d\n%s%s" (String.concat " " args) r.code expected
          r.out r.err;
      if expected = 2 then
        match lines r.err with
        | [ l ] when String.length l > 9 && String.sub l 0 9 = "consortd:" -> ()
        | _ -> Alcotest.failf "%s: not one line naming consortd: %S" (String.concat " " args) r.err)
    cases;
  (* Negative numbers: refused, naming the option. *)
  let opts = numeric_options ~exe:consortd [] in
  if List.length opts < 8 then Alcotest.failf "consortd: only %d numeric options" (List.length opts);
  List.iter
    (fun opt ->
      let r = run ~exe:consortd ~limit:10. (base @ [ opt ^ "=-1" ]) in
      no_defect [ "consortd"; opt ^ "=-1" ] r;
      if r.code <> 124 && r.code <> 2 then Alcotest.failf "consortd %s=-1: exit %d" opt r.code;
      let bare = String.sub opt 2 (String.length opt - 2) in
      if not (contains r.err bare) then Alcotest.failf "consortd %s=-1: %S" opt r.err)
    opts;
  if Sys.file_exists sock then Alcotest.failf "a refused consortd left its socket %s" sock;
  (* Its help: the exit statuses and EXAMPLES with consortd command lines. *)
  let h = run ~exe:consortd [ "--help=plain" ] in
  if
    not
      (contains h.out "EXIT STATUS" && contains h.out "EXAMPLES"
      && contains h.out "       consortd --socket")
  then Alcotest.fail "consortd --help: no EXIT STATUS or EXAMPLES"

(* A file that opens but cannot be read: the error names it. *)
let unreadable_named () =
  List.iter
    (fun cmd ->
      let r = run [ cmd; "/proc/self/mem" ] in
      no_defect [ cmd ] r;
      if r.code <> 2 || not (contains r.err "/proc/self/mem") then
        Alcotest.failf "consort %s /proc/self/mem: exit %d, %S" cmd r.code r.err)
    [ "check-logs"; "check" ]

(* The operations commands against a daemon that died (its socket file
   left behind): refused in one line, exit 2. *)
let dead_daemon () =
  let dead = dead_socket () in
  Fun.protect
    ~finally:(fun () -> try Sys.remove dead with Sys_error _ -> ())
    (fun () ->
      List.iter
        (fun args -> check_refused args [] 2)
        [
          [ "status"; "--control"; dead ];
          [ "counters"; "--control"; dead; "--group"; "g" ];
          [ "cast"; "--control"; dead; "x" ];
          [ "send"; "--control"; dead; "id"; "x" ];
        ])

(* dist/consortd.service's command line, as systemd runs it (its paths
   under a scratch directory): the daemon starts, consort status reaches it
   through the control socket the unit names, and SIGTERM ends it with 0. *)
let systemd_unit () =
  let unit =
    let f = Filename.concat (Filename.dirname (Filename.dirname exe)) "dist/consortd.service" in
    let ic = open_in_bin f in
    let s = really_input_string ic (in_channel_length ic) in
    close_in ic;
    s
  in
  let exec =
    match
      List.find_opt
        (fun l -> String.length l > 10 && String.sub l 0 10 = "ExecStart=")
        (String.split_on_char '\n' unit)
    with
    | Some l -> String.sub l 10 (String.length l - 10)
    | None -> Alcotest.fail "consortd.service has no ExecStart"
  in
  let dir = Filename.concat tmp (Printf.sprintf "consort-cli-unit-%d" (Unix.getpid ())) in
  (try Unix.mkdir dir 0o700 with Unix.Unix_error (Unix.EEXIST, _, _) -> ());
  let port = 26000 + (10 * (Unix.getpid () mod 100)) in
  let args =
    String.split_on_char ' ' exec
    |> List.filter (fun w -> w <> "" && w <> "$CONSORTD_ARGS")
    |> List.map (fun w ->
           if w = "${CONSORTD_BIND}" then Printf.sprintf "127.0.0.1:%d" port
           else if String.length w > 12 && String.sub w 0 12 = "/run/consort" then
             dir ^ String.sub w 12 (String.length w - 12)
           else w)
  in
  let args =
    match args with
    | "/usr/bin/consortd" :: rest -> rest
    | _ -> Alcotest.failf "ExecStart does not run /usr/bin/consortd: %s" exec
  in
  let ctl =
    let rec find = function
      | "--control" :: p :: _ -> p
      | _ :: r -> find r
      | [] -> Alcotest.fail "the unit gives consortd no --control socket"
    in
    find args
  in
  let null = Unix.openfile "/dev/null" [ O_RDWR ] 0 in
  let pid = Unix.create_process consortd (Array.of_list (consortd :: args)) null null null in
  Unix.close null;
  Fun.protect
    ~finally:(fun () ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
      Array.iter
        (fun f -> try Sys.remove (Filename.concat dir f) with Sys_error _ -> ())
        (Sys.readdir dir);
      try Unix.rmdir dir with Unix.Unix_error _ -> ())
    (fun () ->
      let deadline = Unix.gettimeofday () +. 10. in
      while (not (Sys.file_exists ctl)) && Unix.gettimeofday () < deadline do
        Unix.sleepf 0.05
      done;
      let r = run [ "status"; "--control"; ctl ] in
      if r.code <> 0 || not (contains r.out "consortd: 0 clients, 0 members") then
        Alcotest.failf "consort status through the unit's control socket: exit %d\n%s%s" r.code
          r.out r.err;
      Unix.kill pid Sys.sigterm;
      match Unix.waitpid [] pid with
      | _, WEXITED 0 -> ()
      | _, WEXITED c -> Alcotest.failf "consortd exited %d on SIGTERM" c
      | _ -> Alcotest.fail "consortd killed by a signal")

(* consort bench runs consort-bench: found beside consort, it gets the arguments as they are (its
   refusals too); missing (a consort alone in a directory, nothing on PATH), one line and exit 2. *)
let bench_delegates () =
  let r = run [ "bench"; "layering"; "--iterations"; "1000" ] in
  no_defect [ "bench"; "layering" ] r;
  if r.code <> 0 || not (contains r.out "Layering:") then
    Alcotest.failf "consort bench layering: exit %d\n%s%s" r.code r.out r.err;
  let r = run [ "bench"; "layering"; "--iterations"; "0" ] in
  if r.code <> 124 then Alcotest.failf "consort bench layering --iterations 0: exit %d" r.code;
  let dir = Filename.concat tmp (Printf.sprintf "consort-cli-lone-%d" (Unix.getpid ())) in
  let lone = Filename.concat dir "consort" in
  Unix.mkdir dir 0o700;
  Fun.protect
    ~finally:(fun () ->
      (try Sys.remove lone with Sys_error _ -> ());
      try Unix.rmdir dir with Unix.Unix_error _ -> ())
    (fun () ->
      let ic = open_in_bin exe
      and oc = open_out_gen [ Open_wronly; Open_creat; Open_binary ] 0o700 lone in
      let buf = Bytes.create 65536 in
      let rec copy () =
        let k = input ic buf 0 65536 in
        if k > 0 then (
          output oc buf 0 k;
          copy ())
      in
      copy ();
      close_in ic;
      close_out oc;
      let path = Unix.getenv "PATH" in
      Unix.putenv "PATH" dir;
      let r =
        Fun.protect
          ~finally:(fun () -> Unix.putenv "PATH" path)
          (fun () -> run ~exe:lone [ "bench"; "layering" ])
      in
      no_defect [ "bench"; "layering" ] r;
      if r.code <> 2 then
        Alcotest.failf "consort bench without consort-bench: exit %d\n%s%s" r.code r.out r.err;
      match lines r.err with
      | [ l ] when contains l "consort bench:" && contains l "consort-bench" -> ()
      | _ -> Alcotest.failf "consort bench without consort-bench: %S" r.err)

(* consort bench fs end to end, tiny: it starts its own file server (a new one) and reads a file
   through it; its JSON line says so. *)
let bench_fs_runs () =
  let args = [ "bench"; "fs"; "--size"; "1"; "--rounds"; "1"; "--json" ] in
  let r = run ~limit:120. args in
  no_defect args r;
  if r.code <> 0 || not (contains r.out {|{"bench":"fs","size_mb":1,|}) then
    Alcotest.failf "%s: exit %d\n%s%s" (show args) r.code r.out r.err

let () =
  Alcotest.run "cli"
    [
      ( "commands",
        [
          Alcotest.test_case "every command has cases" `Quick every_command_has_cases;
          Alcotest.test_case "bad arguments: one line, the documented status" `Quick bad_arguments;
          Alcotest.test_case "an unknown option: 124" `Quick unknown_option;
          Alcotest.test_case "negative numbers refused when read" `Quick negative_numbers;
          Alcotest.test_case "help everywhere, with exit statuses and examples" `Quick
            help_everywhere;
          Alcotest.test_case "consortd: bad arguments, negative numbers, help" `Quick consortd_cases;
          Alcotest.test_case "a dead daemon's socket" `Quick dead_daemon;
          Alcotest.test_case "an unreadable file is named" `Quick unreadable_named;
          Alcotest.test_case "the systemd unit's command line" `Quick systemd_unit;
          Alcotest.test_case "consort bench runs consort-bench, refuses without it" `Quick
            bench_delegates;
          Alcotest.test_case "consort bench fs runs end to end" `Quick bench_fs_runs;
        ] );
      ( "lists",
        [
          Alcotest.test_case "consort sim --help lists every scenario" `Quick
            sim_help_lists_every_scenario;
          Alcotest.test_case "consort stack knows every property, refuses what cannot work" `Quick
            stack_knows_every_property;
          Alcotest.test_case "the README's table of properties" `Quick readme_table;
        ] );
    ]
