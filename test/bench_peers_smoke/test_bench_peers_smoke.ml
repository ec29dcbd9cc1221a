(* make bench-peers, small: the C raw UDP program on real sockets (its
   credit window keeps 60 KB datagrams lossless through a small receive
   buffer), the report on inputs whose right answers are known (including
   runs that must be flagged: members that disagree on the order, a member
   that gave no result, a raw run that lost datagrams), its SVG chart read
   back as XML, and the script end to end with raw UDP only. *)

module R = Consort_peers_bench.Report

let here = Filename.dirname Sys.executable_name
let peers = Filename.concat here "../../bench/peers"

let temp_dir () =
  let d =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "bench-peers-smoke-%d-%d" (Unix.getpid ()) (Random.bits ()))
  in
  Unix.mkdir d 0o700;
  d

let rm_rf d = ignore (Sys.command (Printf.sprintf "rm -rf %s" (Filename.quote d)))

let write file s =
  let oc = open_out file in
  output_string oc s;
  close_out oc

let run_lines cmd =
  let ic = Unix.open_process_in cmd in
  let rec go acc =
    match input_line ic with l -> go (l :: acc) | exception End_of_file -> List.rev acc
  in
  let lines = go [] in
  match Unix.close_process_in ic with
  | Unix.WEXITED 0 -> lines
  | _ -> Alcotest.failf "%s failed" cmd

let field k r =
  match List.assoc_opt k r with Some v -> v | None -> Alcotest.failf "no %s in the result" k

let num k r =
  match float_of_string_opt (field k r) with
  | Some f -> f
  | None -> Alcotest.failf "%s is not a number" k

let between what lo hi x =
  if not (x >= lo && x <= hi) then Alcotest.failf "%s: %g is not within [%g, %g]" what x lo hi

let one_result cmd =
  match List.filter_map R.parse_result (run_lines cmd) with
  | [ r ] -> r
  | l -> Alcotest.failf "%s: %d result lines" cmd (List.length l)

let raw_udp () =
  let exe = Filename.quote (Filename.concat peers "udp_raw") in
  let r = one_result (exe ^ " rtt --count 300 --warmup 20 --size 16 --cpus 0,0 --deadline 20") in
  Alcotest.(check string) "placement" "same-cpu" (field "placement" r);
  Alcotest.(check string) "n" "300" (field "n" r);
  between "median us" 1. 50_000. (num "median_us" r);
  if num "min_us" r > num "median_us" r || num "median_us" r > num "p99_us" r then
    Alcotest.fail "min <= median <= p99";
  let t = one_result (exe ^ " tput --count 3000 --size 1024 --receivers 2 --deadline 20") in
  Alcotest.(check string) "sent" "6000" (field "sender_sent" t);
  List.iter
    (fun i ->
      let got = num (Printf.sprintf "r%d_received" i) t in
      between "received" 1. 3000. got;
      Alcotest.(check string) "in order on loopback" "0" (field (Printf.sprintf "r%d_disorder" i) t))
    [ 0; 1 ];
  between "messages/s" 1. 1e8 (num "msgs_per_s" t);
  (* A bad argument is refused with one line, and nothing runs. *)
  Alcotest.(check bool)
    "bad count refused" true
    (Sys.command (exe ^ " rtt --count -3 2>/dev/null") <> 0);
  Alcotest.(check bool)
    "bad sender count refused" true
    (Sys.command (exe ^ " flow --senders 9 2>/dev/null") <> 0)

(* The credit window, 3 member processes: every member delivers every
   datagram (its own as it sends them), none lost or out of order. The
   60 KB run goes through a receive buffer of 256 KB (the kernel doubles
   it): a window of 2 datagrams per sender and receiver, where a sender
   with no window puts 64 datagrams (3.8 MB) into one sendmmsg. *)
let raw_flow () =
  let exe = Filename.quote (Filename.concat peers "udp_raw") in
  List.iter
    (fun (size, senders, count, extra) ->
      let what = Printf.sprintf "%d bytes, %d sender(s)" size senders in
      let t =
        one_result
          (Printf.sprintf "%s flow --count %d --size %d --senders %d --members 3 --deadline 30%s"
             exe count size senders extra)
      in
      Alcotest.(check string) (what ^ ": mode") "flow" (field "mode" t);
      Alcotest.(check string) (what ^ ": nothing lost") "0" (field "lost" t);
      Alcotest.(check string) (what ^ ": nothing out of order") "0" (field "disorder" t);
      Alcotest.(check string) (what ^ ": in time") "0" (field "late" t);
      List.iter
        (fun m ->
          let k x = Printf.sprintf "m%d_%s" m x in
          Alcotest.(check string)
            (what ^ ": " ^ k "delivered")
            (string_of_int (count * senders))
            (field (k "delivered") t);
          Alcotest.(check string)
            (what ^ ": " ^ k "own")
            (string_of_int (if m < senders then count else 0))
            (field (k "own") t))
        [ 0; 1; 2 ];
      between (what ^ ": messages/s") 1. 1e8 (num "msgs_per_s" t);
      Alcotest.(check (float 0.11))
        (what ^ ": MB/s is messages/s times the size")
        (num "msgs_per_s" t *. float size /. 1e6)
        (num "mb_per_s" t))
    [ (1024, 1, 2000, ""); (1024, 3, 1000, ""); (60000, 3, 150, " --rcvbuf 262144") ];
  let t =
    one_result (exe ^ " flow --count 150 --size 60000 --senders 1 --rcvbuf 262144 --deadline 30")
  in
  between "window from a 512 KB buffer" 1. 4. (num "window" t)

(* {1 The SVG chart, read back}

   A small XML reader, strict where it matters here: every element closed
   by its own name, attributes quoted and not repeated, no raw '<' or '&'
   outside a known entity, one root and nothing after it. *)

type node = { tag : string; attrs : (string * string) list; children : node list }

let parse_xml s =
  let n = String.length s in
  let pos = ref 0 in
  let fail m = Alcotest.failf "the SVG is not well-formed XML at byte %d: %s" !pos m in
  let looking_at t = !pos + String.length t <= n && String.sub s !pos (String.length t) = t in
  let expect t = if looking_at t then pos := !pos + String.length t else fail ("expected " ^ t) in
  let skip_ws () =
    while !pos < n && match s.[!pos] with ' ' | '\n' | '\t' | '\r' -> true | _ -> false do
      incr pos
    done
  in
  let name () =
    let st = !pos in
    while
      !pos < n
      &&
      match s.[!pos] with
      | 'a' .. 'z' | 'A' .. 'Z' | '0' .. '9' | '-' | '_' | ':' | '.' -> true
      | _ -> false
    do
      incr pos
    done;
    if !pos = st then fail "expected a name";
    String.sub s st (!pos - st)
  in
  (* Checks the entities of a piece of text and decodes them. *)
  let decode t =
    let b = Buffer.create (String.length t) in
    let i = ref 0 in
    while !i < String.length t do
      (match t.[!i] with
      | '<' -> fail "a raw < in text or an attribute"
      | '&' -> (
          match String.index_from_opt t !i ';' with
          | None -> fail "an & with no entity"
          | Some j ->
              (match String.sub t (!i + 1) (j - !i - 1) with
              | "amp" -> Buffer.add_char b '&'
              | "lt" -> Buffer.add_char b '<'
              | "gt" -> Buffer.add_char b '>'
              | "quot" -> Buffer.add_char b '"'
              | "apos" -> Buffer.add_char b '\''
              | e -> fail ("unknown entity &" ^ e ^ ";"));
              i := j)
      | c -> Buffer.add_char b c);
      incr i
    done;
    Buffer.contents b
  in
  let rec element () =
    expect "<";
    let tag = name () in
    let rec attrs acc =
      skip_ws ();
      if looking_at "/>" then (
        pos := !pos + 2;
        (List.rev acc, true))
      else if looking_at ">" then (
        incr pos;
        (List.rev acc, false))
      else
        let k = name () in
        skip_ws ();
        expect "=";
        skip_ws ();
        expect "\"";
        let st = !pos in
        while !pos < n && s.[!pos] <> '"' do
          incr pos
        done;
        let v = decode (String.sub s st (!pos - st)) in
        expect "\"";
        if List.mem_assoc k acc then fail ("attribute " ^ k ^ " twice");
        attrs ((k, v) :: acc)
    in
    let attrs, empty = attrs [] in
    if empty then { tag; attrs; children = [] }
    else
      let rec content acc =
        if looking_at "</" then begin
          pos := !pos + 2;
          let t = name () in
          if t <> tag then fail (Printf.sprintf "</%s> closes <%s>" t tag);
          skip_ws ();
          expect ">";
          List.rev acc
        end
        else if looking_at "<" then content (element () :: acc)
        else if !pos >= n then fail ("<" ^ tag ^ "> is never closed")
        else begin
          let st = !pos in
          while !pos < n && s.[!pos] <> '<' do
            incr pos
          done;
          ignore (decode (String.sub s st (!pos - st)));
          content acc
        end
      in
      { tag; attrs; children = content [] }
  in
  skip_ws ();
  if looking_at "<?xml" then begin
    while !pos < n && not (looking_at "?>") do
      incr pos
    done;
    expect "?>"
  end;
  skip_ws ();
  let root = element () in
  skip_ws ();
  if !pos <> n then fail "something after the root element";
  root

let rec all_nodes nd = nd :: List.concat_map all_nodes nd.children

(* One bar per throughput row of the JSON, in the same order, each with
   the row's messages/s and payload MB/s. *)
let check_svg file j =
  let ic = open_in_bin file in
  let s = really_input_string ic (in_channel_length ic) in
  close_in ic;
  let root = parse_xml s in
  Alcotest.(check string) "the root is svg" "svg" root.tag;
  let bars =
    List.filter
      (fun nd -> nd.tag = "rect" && List.assoc_opt "class" nd.attrs = Some "bar")
      (all_nodes root)
  in
  let rows =
    match j with
    | `Assoc l -> ( match List.assoc_opt "throughput" l with Some (`List r) -> r | _ -> [])
    | _ -> []
  in
  Alcotest.(check int) "one bar per throughput row" (List.length rows) (List.length bars);
  Alcotest.(check bool) "some rows" true (rows <> []);
  let attr nd k =
    match List.assoc_opt k nd.attrs with Some v -> v | None -> Alcotest.failf "a bar has no %s" k
  in
  let the k = function
    | `Assoc l -> ( match List.assoc_opt k l with Some v -> v | None -> Alcotest.failf "no %s" k)
    | _ -> Alcotest.fail "not an object"
  in
  let widest = ref 0. in
  List.iter2
    (fun bar row ->
      let sys = match the "system" row with `String s -> s | _ -> "?" in
      Alcotest.(check string) "bar's system" sys (attr bar "data-system");
      Alcotest.(check string)
        (sys ^ ": bar's senders")
        (match the "senders" row with `Int n -> string_of_int n | _ -> "?")
        (attr bar "data-senders");
      let num_of = function `Float f -> Some f | `Int i -> Some (float i) | _ -> None in
      match (num_of (the "msgs_per_s" row), num_of (the "payload_mb_per_s" row)) with
      | Some rate, Some mb ->
          Alcotest.(check string)
            (sys ^ ": bar's messages/s") (Printf.sprintf "%.0f" rate) (attr bar "data-msgs-per-s");
          Alcotest.(check string)
            (sys ^ ": bar's MB/s") (Printf.sprintf "%.1f" mb) (attr bar "data-mb-per-s");
          let w = float_of_string (attr bar "width") in
          if w <= 0. then Alcotest.failf "%s: a figure and no bar" sys;
          widest := Float.max !widest w
      | _ ->
          Alcotest.(check string) (sys ^ ": no figure, no value") "" (attr bar "data-msgs-per-s");
          Alcotest.(check string) (sys ^ ": no figure, no bar") "0.0" (attr bar "width"))
    bars rows;
  (* The bars are to scale: the longest is the largest payload. *)
  let widths_by_mb =
    List.filter_map
      (fun bar ->
        match float_of_string_opt (attr bar "data-mb-per-s") with
        | Some mb -> Some (mb, float_of_string (attr bar "width"))
        | None -> None)
      bars
  in
  let mx = List.fold_left (fun a (mb, _) -> Float.max a mb) 0. widths_by_mb in
  List.iter
    (fun (mb, w) -> Alcotest.(check (float 0.6)) "bar to scale" (mb /. mx *. !widest) w)
    widths_by_mb

(* {1 The report, on known inputs} *)

let consort_rtt =
  {|{"bench":"rtt","bytes":16,"rows":[{"kind":"raw UDP","placement":"same CPU","cpus":"0,0","n":100,"min_us":9.0,"median_us":10.0,"p99_us":12.0,"mean_us":10.0},{"kind":"group cast","placement":"same CPU","cpus":"0,0","n":100,"min_us":20.0,"median_us":30.0,"p99_us":40.0,"mean_us":30.0},{"kind":"group cast","placement":"different CPUs","cpus":"0,1","n":100,"min_us":20.0,"median_us":52.0,"p99_us":60.0,"mean_us":52.0}]}|}

let consort_tput =
  {|{"bench":"throughput","rows":[{"kind":"vsync FIFO","senders":1,"bytes":1024,"count":100,"ok":true,"runs_slowest_messages_per_s":[50000,70000,60000],"members":[]},{"kind":"Total seq","senders":1,"bytes":1024,"count":100,"ok":true,"runs_slowest_messages_per_s":[40000],"members":[{"index":0,"rank":0},{"index":1,"rank":1}]}]}|}

let results =
  String.concat "\n"
    [
      "result bench=rtt system=raw-udp bytes=16 cpus=0,0 placement=same-cpu n=100 min_us=11.00 \
       median_us=12.00 p99_us=13.00 mean_us=12.00 setup=loopback";
      "result bench=rtt system=raw-udp bytes=16 cpus=0,1 placement=different-cpus n=100 \
       min_us=20.00 median_us=50.00 p99_us=60.00 mean_us=50.00 setup=loopback";
      "result bench=tput system=raw-udp bytes=1024 count=100 msgs_per_s=90000 lost_pct=0.00 \
       run=raw1";
      (* The byte limit: two lossless runs, 1 sender (10000 and 12000 datagrams/s of 60000
         bytes: 660 MB/s at the median); and the datagram limit with 3 senders, one run that
         lost datagrams. *)
      "result bench=tput system=raw-udp mode=flow bytes=60000 count=100 senders=1 members=3 \
       window=68 lost=0 disorder=0 late=0 msgs_per_s=10000 run=f1";
      "result bench=tput system=raw-udp mode=flow bytes=60000 count=100 senders=1 members=3 \
       window=68 lost=0 disorder=0 late=0 msgs_per_s=12000 run=f2";
      "result bench=tput system=raw-udp mode=flow bytes=1024 count=100 senders=3 members=3 \
       window=2048 lost=5 disorder=0 late=0 msgs_per_s=900000 run=f3";
      (* CPG: two good runs, one each side of 20000 at the slowest member. *)
      "result bench=tput system=corosync-cpg index=0 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=21000 order_hash=aa setup=one run=c1";
      "result bench=tput system=corosync-cpg index=1 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=19000 order_hash=aa setup=one run=c1";
      "result bench=tput system=corosync-cpg index=2 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=25000 order_hash=aa setup=one run=c1";
      "result bench=tput system=corosync-cpg index=0 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=21000 order_hash=bb setup=one run=c2";
      "result bench=tput system=corosync-cpg index=1 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=23000 order_hash=bb setup=one run=c2";
      "result bench=tput system=corosync-cpg index=2 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=21000 order_hash=bb setup=one run=c2";
      (* CPG elsewhere: faster, but the members disagree on the order. *)
      "result bench=tput system=corosync-cpg index=0 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=99000 order_hash=aa setup=two run=d1";
      "result bench=tput system=corosync-cpg index=1 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=99000 order_hash=ab setup=two run=d1";
      "result bench=tput system=corosync-cpg index=2 members=3 senders=1 delivered=100 \
       expected=100 errors=0 msgs_per_s=99000 order_hash=aa setup=two run=d1";
      (* JGroups FIFO: a member gave no result. *)
      "result bench=tput system=jgroups config=udp.xml order=fifo index=0 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=500000 order_hash=aa setup=x run=j1";
      "result bench=tput system=jgroups config=udp.xml order=fifo index=1 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=500000 order_hash=aa setup=x run=j1";
      (* JGroups tcp + SEQUENCER: a run short at the deadline (left out), a
         run with no result from member 2 (left out), a good run. *)
      "result bench=tput system=jgroups config=tcp.xml order=total index=0 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=10000 order_hash=aa setup=x run=k1";
      "result bench=tput system=jgroups config=tcp.xml order=total index=1 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=10000 order_hash=aa setup=x run=k1";
      "result bench=tput system=jgroups config=tcp.xml order=total index=2 members=3 senders=1 \
       delivered=99 expected=100 errors=0 msgs_per_s=10000 order_hash=aa setup=x run=k1";
      "result bench=tput system=jgroups config=tcp.xml order=total index=0 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=90000 order_hash=aa setup=x run=k2";
      "result bench=tput system=jgroups config=tcp.xml order=total index=1 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=90000 order_hash=aa setup=x run=k2";
      "result bench=tput system=jgroups config=tcp.xml order=total index=2 members=3 senders=1 \
       no_result=1 setup=x run=k2";
      "result bench=tput system=jgroups config=tcp.xml order=total index=0 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=12000 order_hash=cc setup=x run=k3";
      "result bench=tput system=jgroups config=tcp.xml order=total index=1 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=16000 order_hash=cc setup=x run=k3";
      "result bench=tput system=jgroups config=tcp.xml order=total index=2 members=3 senders=1 \
       delivered=100 expected=100 errors=0 msgs_per_s=13000 order_hash=cc setup=x run=k3";
      (* Corosync elsewhere: a duplicate seen by one member. *)
      "result bench=tput system=corosync-cpg index=0 members=3 senders=3 delivered=300 \
       expected=300 errors=0 msgs_per_s=50000 order_hash=aa setup=one run=e1";
      "result bench=tput system=corosync-cpg index=1 members=3 senders=3 delivered=300 \
       expected=300 errors=1 msgs_per_s=50000 order_hash=aa setup=one run=e1";
      "result bench=tput system=corosync-cpg index=2 members=3 senders=3 delivered=300 \
       expected=300 errors=0 msgs_per_s=50000 order_hash=aa setup=one run=e1";
      "not a result line";
      "";
    ]

let assoc k = function
  | `Assoc l -> ( match List.assoc_opt k l with Some v -> v | None -> Alcotest.failf "no %s" k)
  | _ -> Alcotest.failf "%s: not an object" k

let str = function `String s -> s | _ -> Alcotest.fail "not a string"
let flt = function `Float f -> f | `Int i -> float i | _ -> Alcotest.fail "not a number"
let lst = function `List l -> l | _ -> Alcotest.fail "not a list"

let find what p l =
  match List.filter p l with [ x ] -> x | l -> Alcotest.failf "%s: %d rows" what (List.length l)

let report () =
  let d = temp_dir () in
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  write (Filename.concat d "meta.tsv")
    "cpu_model\tTest CPU\ncores\t2\nload_start\t0.10 0.20 0.30\njgroups\tJGroups 5.test\n";
  write (Filename.concat d "results.txt") results;
  write (Filename.concat d "consort-rtt.json") ("Round trip table\n" ^ consort_rtt ^ "\n");
  write (Filename.concat d "consort-tput.json") consort_tput;
  (* Another round of Consort's throughput: its runs join the same row.
     Its 2-sender Total row chose its senders by rank (processes 0 and 2,
     ranks 1 and 2: not the sequencer, process 1). *)
  write
    (Filename.concat d "consort-tput-2.json")
    {|{"bench":"throughput","rows":[{"kind":"vsync FIFO","senders":1,"bytes":1024,"count":100,"ok":true,"runs_slowest_messages_per_s":[80000],"members":[]},{"kind":"Total seq","senders":1,"bytes":1024,"count":100,"ok":true,"runs_slowest_messages_per_s":[40000],"members":[{"index":0,"rank":2},{"index":1,"rank":0}]},{"kind":"Total seq","senders":2,"bytes":1024,"count":100,"ok":true,"runs_slowest_messages_per_s":[30000],"members":[{"index":0,"role":"sender+receiver","rank":1},{"index":1,"role":"receiver","rank":0},{"index":2,"role":"sender+receiver","rank":2}],"sender_not_sequencer":true,"sequencer_index":1,"sender_indexes":[0,2],"sequencer_cast":false}]}|};
  write (Filename.concat d "skipped.tsv") "Something\tnot here\n";
  let out = Filename.concat d "out.json" in
  let svg = Filename.concat d "out.svg" in
  (match R.run ~svg ~dir:d ~out:(Some out) () with Ok () -> () | Error e -> Alcotest.fail e);
  let j = Yojson.Safe.from_file out in
  check_svg svg j;
  Alcotest.(check string) "machine" "Test CPU" (str (assoc "cpu_model" (assoc "machine" j)));
  Alcotest.(check string) "versions" "JGroups 5.test" (str (assoc "jgroups" (assoc "versions" j)));
  let rtt = lst (assoc "rtt" j) in
  let row sys pl =
    find
      (sys ^ " " ^ pl)
      (fun r -> str (assoc "system" r) = sys && str (assoc "placement" r) = pl)
      rtt
  in
  Alcotest.(check (float 1e-9))
    "raw same" 12.
    (flt (assoc "median_us" (row "raw UDP (C)" "same-cpu")));
  Alcotest.(check (float 1e-9))
    "consort same" 30.
    (flt (assoc "median_us" (row "Consort vsync" "same-cpu")));
  Alcotest.(check int)
    "consort's own raw UDP row is not the C floor" 0
    (List.length (List.filter (fun r -> str (assoc "system" r) = "raw UDP") rtt));
  let tp = lst (assoc "throughput" j) in
  let trow ?(senders = 1) sys setup =
    find
      (sys ^ " " ^ setup)
      (fun r ->
        str (assoc "system" r) = sys
        && str (assoc "setup" r) = setup
        && assoc "senders" r = `Int senders)
      tp
  in
  let cf = trow "Consort vsync" "loopback" in
  Alcotest.(check (float 1e-9))
    "consort FIFO: the median of every round's runs" 65000.
    (flt (assoc "msgs_per_s" cf));
  Alcotest.(check int)
    "consort FIFO: 4 runs from 2 files" 4
    (List.length (lst (assoc "runs_msgs_per_s" cf)));
  (* Member 0, the one sender, was rank 0 (the sequencer) in the first
     round only; member 1 being rank 0 in the second does not count. *)
  Alcotest.(check bool)
    "total, 1 sender: how often the sender was the sequencer" true
    (let c = str (assoc "checks" (trow "Consort Total seq" "loopback")) in
     let sub = "the sender was the sequencer in 1 of 2 runs" in
     let n = String.length c and k = String.length sub in
     let rec go i = i + k <= n && (String.sub c i k = sub || go (i + 1)) in
     go 0);
  (* Senders chosen by rank: the row says so, and that the sequencer (a
     member that did not cast, though index 1 < 2 senders) did not cast. *)
  Alcotest.(check bool)
    "total, 2 senders by rank: the sequencer did not cast" true
    (let c = str (assoc "checks" (trow ~senders:2 "Consort Total seq" "loopback")) in
     let sub =
       "not the sequencer (rank 0) unless all (2 senders): the sequencer cast in 0 of 1 runs"
     in
     let n = String.length c and k = String.length sub in
     let rec go i = i + k <= n && (String.sub c i k = sub || go (i + 1)) in
     go 0);
  let cpg = trow "Corosync CPG" "one" in
  Alcotest.(check bool) "CPG ok" true (assoc "ok" cpg = `Bool true);
  (* Slowest members 19000 and 21000: the median of two runs. *)
  Alcotest.(check (float 1e-9)) "CPG slowest member, median" 20000. (flt (assoc "msgs_per_s" cpg));
  let bad = trow "Corosync CPG" "two" in
  Alcotest.(check bool) "orders differ: not ok" true (assoc "ok" bad = `Bool false);
  let ends_with suffix s =
    let n = String.length s and k = String.length suffix in
    n >= k && String.sub s (n - k) k = suffix
  in
  Alcotest.(check bool)
    "orders differ: said" true
    (ends_with "MEMBERS DELIVERED IN DIFFERENT ORDERS" (str (assoc "checks" bad)));
  let starts_with prefix s =
    String.length s >= String.length prefix && String.sub s 0 (String.length prefix) = prefix
  in
  let contains sub s =
    let n = String.length s and k = String.length sub in
    let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
    go 0
  in
  let jf = trow "JGroups udp.xml" "x" in
  Alcotest.(check bool) "member missing, no other run: not ok" true (assoc "ok" jf = `Bool false);
  Alcotest.(check bool) "member missing: no figure" true (assoc "msgs_per_s" jf = `Null);
  Alcotest.(check bool)
    "member missing: said" true
    (starts_with "NO RUN FINISHED" (str (assoc "checks" jf)));
  let js = trow "JGroups tcp.xml+SEQUENCER" "x" in
  Alcotest.(check bool) "unfinished runs left out: ok" true (assoc "ok" js = `Bool true);
  Alcotest.(check (float 1e-9))
    "unfinished runs left out: the good run's slowest" 12000.
    (flt (assoc "msgs_per_s" js));
  Alcotest.(check int) "one run counted" 1 (List.length (lst (assoc "runs_msgs_per_s" js)));
  Alcotest.(check bool)
    "unfinished runs: said" true
    (contains "2 of 3 runs did not finish" (str (assoc "checks" js)));
  let dup =
    find "CPG 3 senders"
      (fun r -> str (assoc "system" r) = "Corosync CPG" && assoc "senders" r = `Int 3)
      tp
  in
  Alcotest.(check bool) "a duplicate: not ok" true (assoc "ok" dup = `Bool false);
  Alcotest.(check bool)
    "a duplicate: said" true
    (contains "WRONG DELIVERIES" (str (assoc "checks" dup)));
  let tg = lst (assoc "targets" j) in
  let target prefix =
    find prefix
      (fun t ->
        let s = str (assoc "target" t) in
        String.length s >= String.length prefix && String.sub s 0 (String.length prefix) = prefix)
      tg
  in
  (* Only the checked CPG figure counts: 40000 / 20000, short of 3x. *)
  let t = target "total 1 KB, 3 processes, 1 sender(s): Consort / best Corosync CPG" in
  Alcotest.(check (float 1e-9)) "total vs CPG" 2.0 (flt (assoc "value" t));
  Alcotest.(check bool) "total vs CPG short of 3x" true (assoc "met" t = `Bool false);
  (* Consort's FIFO payload against the byte limit: 65000 casts/s of 1024 bytes against the
     median of the lossless runs, 11000 datagrams/s of 60000 bytes. *)
  let t = target "FIFO payload, 3 processes, 1 sender(s): Consort / raw UDP byte limit" in
  Alcotest.(check (float 1e-9))
    "payload / byte limit"
    (65000. *. 1024. /. (11000. *. 60000.))
    (flt (assoc "value" t));
  Alcotest.(check bool) "payload / byte limit: short of 0.4" true (assoc "met" t = `Bool false);
  let lim =
    trow "raw UDP (C), byte limit"
      "loopback, 3 processes, 60 KB datagrams, sendmmsg/recvmmsg, credit window"
  in
  Alcotest.(check (float 1e-9)) "byte limit: payload MB/s" 660. (flt (assoc "payload_mb_per_s" lim));
  Alcotest.(check (float 1e-9))
    "byte limit: of itself" 1.
    (flt (assoc "fraction_of_byte_limit" lim));
  Alcotest.(check (float 1e-9))
    "Consort FIFO: fraction of the byte limit in its row"
    (65000. *. 1024. /. 660e6)
    (flt (assoc "fraction_of_byte_limit" cf));
  let lossy =
    trow ~senders:3 "raw UDP (C), datagram limit"
      "loopback, 3 processes, 1 KB datagrams, sendmmsg/recvmmsg, credit window"
  in
  Alcotest.(check bool) "raw run that lost: not ok" true (assoc "ok" lossy = `Bool false);
  Alcotest.(check bool)
    "raw run that lost: said" true
    (starts_with "LOST 5" (str (assoc "checks" lossy)));
  Alcotest.(check bool) "raw run that lost: no figure" true (assoc "msgs_per_s" lossy = `Null);
  (* JGroups FIFO has no finished run: no ratio, no verdict. *)
  let t = target "FIFO 1 KB, 3 processes, 1 sender(s)" in
  Alcotest.(check bool)
    "FIFO vs failed JGroups: no value" true
    (assoc "value" t = `Null && assoc "met" t = `Null);
  let t = target "total 1 KB, 3 processes, 1 sender(s): Consort / best JGroups total" in
  Alcotest.(check (float 1e-9))
    "total vs best JGroups total: 40000 / 12000" (40000. /. 12000.)
    (flt (assoc "value" t));
  let t = target "total 1 KB, 3 processes, 1 sender(s): Consort total / Consort FIFO" in
  Alcotest.(check (float 1e-9))
    "total / FIFO: 40000 / 65000" (40000. /. 65000.)
    (flt (assoc "value" t));
  let t = target "round trip 16 B, same-cpu" in
  Alcotest.(check (float 1e-9)) "rtt same: +18 us" 18. (flt (assoc "value" t));
  Alcotest.(check bool) "rtt same: short" true (assoc "met" t = `Bool false);
  let t = target "round trip 16 B, different-cpus" in
  Alcotest.(check bool) "rtt different: met" true (assoc "met" t = `Bool true);
  let fused = find "fused" (fun c -> str (assoc "path" c) = "fused") (lst (assoc "stack_cost" j)) in
  Alcotest.(check bool) "fused: no number" true (assoc "ns_per_msg" fused = `Null);
  Alcotest.(check string)
    "fused: said" "not built: no fused path in this tree"
    (str (assoc "note" fused));
  Alcotest.(check int) "skipped kept" 1 (List.length (lst (assoc "skipped" j)));
  (* Bad input: one error, no exception. *)
  (match R.run ~dir:(Filename.concat d "nope") ~out:None () with
  | Error _ -> ()
  | Ok () -> Alcotest.fail "a missing directory is an error");
  let empty = Filename.concat d "empty" in
  Unix.mkdir empty 0o700;
  match R.run ~dir:empty ~out:None () with
  | Error _ -> ()
  | Ok () -> Alcotest.fail "an empty directory is an error"

(* Stack-cost rows: the fused / layered ratio, the minor words per layer
   above Bottom alone, and the major words in steady state, each a target
   computed from the rows. *)
let report_costs () =
  let d = temp_dir () in
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  write (Filename.concat d "meta.tsv") "cpu_model\tTest CPU\ncores\t2\n";
  write (Filename.concat d "results.txt") results;
  let row stack path layers ns minor major =
    Printf.sprintf
      {|{"stack":"%s","path":"%s","layers":%d,"ns_per_msg":%g,"minor_words_per_msg":%g,"major_words_per_msg":%g}|}
      stack path layers ns minor major
  in
  let costs major =
    "["
    ^ String.concat ","
        [
          row "default (vsync)" "fused" 9 300. 81. major;
          row "default (vsync)" "layered" 9 1200. 202. 9.7;
          row "Bottom alone" "layered" 1 180. 89. 0.007;
        ]
    ^ "]"
  in
  let targets major =
    write (Filename.concat d "stack-cost.json") (costs major);
    let out = Filename.concat d "out.json" in
    (match R.run ~dir:d ~out:(Some out) () with Ok () -> () | Error e -> Alcotest.fail e);
    let tg = lst (assoc "targets" (Yojson.Safe.from_file out)) in
    fun prefix ->
      find prefix
        (fun t ->
          let s = str (assoc "target" t) in
          String.length s >= String.length prefix && String.sub s 0 (String.length prefix) = prefix)
        tg
  in
  let target = targets 0.02 in
  let t = target "stack cost: fused / layered, range over the stacks measured" in
  Alcotest.(check (float 1e-9)) "fused / layered" 0.25 (flt (assoc "value" t));
  Alcotest.(check bool) "fused / layered met" true (assoc "met" t = `Bool true);
  let t = target "minor words per message per layer" in
  Alcotest.(check (float 1e-9)) "words per layer above Bottom" (-0.5) (flt (assoc "value" t));
  let t = target "major words per message in steady state" in
  Alcotest.(check (float 1e-9)) "major words" 0.02 (flt (assoc "value" t));
  Alcotest.(check bool) "major words met" true (assoc "met" t = `Bool true);
  let t = targets 1.5 "major words per message in steady state" in
  Alcotest.(check bool)
    "a word per message in the major heap: short" true
    (assoc "met" t = `Bool false)

(* {1 The script end to end, raw UDP only} *)

let script () =
  let d = temp_dir () in
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  let cmd =
    Printf.sprintf "PEERS=raw QUICK=1 RESULTS_DIR=%s CONSORT=%s BENCH_PEERS=%s %s > %s 2>&1"
      (Filename.quote d)
      (Filename.quote (Filename.concat here "../../bin/main.exe"))
      (Filename.quote (Filename.concat peers "main.exe"))
      (Filename.quote (Filename.concat peers "bench-peers.sh"))
      (Filename.quote (Filename.concat d "log"))
  in
  if Sys.command cmd <> 0 then Alcotest.failf "bench-peers.sh failed: see %s" cmd;
  let j = Yojson.Safe.from_file (Filename.concat d "peers-quick.json") in
  Alcotest.(check bool) "cores" true (str (assoc "cores" (assoc "machine" j)) <> "");
  Alcotest.(check bool)
    "load at start" true
    (String.length (str (assoc "load_start" (assoc "machine" j))) > 0);
  let rtt = lst (assoc "rtt" j) in
  let same = find "raw same" (fun r -> str (assoc "placement" r) = "same-cpu") rtt in
  between "raw UDP round trip, us" 1. 50_000. (flt (assoc "median_us" same));
  let tp = lst (assoc "throughput" j) in
  let raw = find "raw tput" (fun r -> str (assoc "system" r) = "raw UDP (C)") tp in
  between "raw UDP messages/s" 1. 1e8 (flt (assoc "msgs_per_s" raw));
  List.iter
    (fun senders ->
      let lim =
        find "byte limit"
          (fun r ->
            str (assoc "system" r) = "raw UDP (C), byte limit" && assoc "senders" r = `Int senders)
          tp
      in
      Alcotest.(check bool) "byte limit: lossless" true (assoc "ok" lim = `Bool true);
      Alcotest.(check int)
        "byte limit: 60 KB datagrams" 60000
        (match assoc "bytes" lim with `Int n -> n | _ -> 0))
    [ 1; 3 ];
  Alcotest.(check int) "nothing skipped" 0 (List.length (lst (assoc "skipped" j)));
  check_svg (Filename.concat d "peers-quick.svg") j

let () =
  Alcotest.run "bench_peers_smoke"
    [
      ( "udp_raw",
        [
          Alcotest.test_case "round trip and throughput on loopback" `Quick raw_udp;
          Alcotest.test_case "sendmmsg/recvmmsg with a credit window: lossless" `Quick raw_flow;
        ] );
      ( "report",
        [
          Alcotest.test_case "known inputs, flagged runs, targets, JSON" `Quick report;
          Alcotest.test_case "stack-cost targets" `Quick report_costs;
        ] );
      ("script", [ Alcotest.test_case "bench-peers.sh with raw UDP only" `Quick script ]);
    ]
