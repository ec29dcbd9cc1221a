(* Bundling (Consort_group.Bundle) over the deterministic simulator: what
   goes on the wire, in what order, when; hostile bundles; and a group
   whose members cast in bursts. *)

open Consort
module Sim = Consort_engine.Sim
module Bundle = Consort_group.Bundle
module B = Bundle.Make (Sim)

let ms = Time.of_ms

(* A plain simulated endpoint that records the raw datagrams it gets, with
   their arrival time. *)
let raw net addr =
  let got = ref [] in
  let h _ =
    {
      Sim.recv =
        (fun ~src:_ v ->
          got := (Sim.now net, Iovec.to_string v) :: !got;
          Iovec.release v);
      closed = ignore;
    }
  in
  match Sim.open_ net addr h with
  | Ok c -> (c, got)
  | Error e -> Alcotest.failf "open %s: %a" addr Transport.pp_error e

(* A bundling endpoint that records the datagrams handed up, by source. *)
let bundled ?size net addr =
  let got = ref [] in
  let h _ =
    {
      B.recv =
        (fun ~src v ->
          got := (src, Iovec.to_string v) :: !got;
          Iovec.release v);
      closed = ignore;
    }
  in
  match B.open_with ?size net addr h with
  | Ok c -> (c, got)
  | Error e -> Alcotest.failf "open %s: %a" addr Transport.pp_error e

let send c dst s =
  let m = Msg.of_string Pool.default s in
  (match B.send c ~dst m with
  | Ok () -> ()
  | Error e -> Alcotest.failf "send: %a" Transport.pp_error e);
  Msg.release m

let cast c dsts s =
  let m = Msg.of_string Pool.default s in
  (match B.cast c ~dsts m with
  | Ok () -> ()
  | Error e -> Alcotest.failf "cast: %a" Transport.pp_error e);
  Msg.release m

let payload i n =
  let h = Printf.sprintf "m%d:" i in
  h ^ String.make (max 0 (n - String.length h)) (Char.chr (97 + (i mod 26)))

let strings = Alcotest.(list string)

(* {1 Low load} *)

(* One datagram in a step goes out as it was given, with no byte added,
   and arrives when a plain send made at the same time does. *)
let lone () =
  let net = Sim.create ~seed:1 () in
  let _r, got = raw net "r" in
  let s, _ = bundled net "s" in
  let p =
    match
      Sim.open_ net "p" (fun _ -> { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
    with
    | Ok c -> c
    | Error _ -> Alcotest.fail "open p"
  in
  ignore
    (Sim.at net (ms 5) (fun () ->
         send s "r" "hello";
         let m = Msg.of_string Pool.default "plain" in
         ignore (Sim.send p ~dst:"r" m);
         Msg.release m));
  ignore (Sim.at net (ms 20) (fun () -> cast s [ "r" ] "alone"));
  Sim.run net;
  match List.sort (fun (t, a) (t', b) -> compare (t, a) (t', b)) !got with
  | [ (t1, a); (t2, b); (t3, c) ] ->
      Alcotest.(check string) "as given" "hello" a;
      Alcotest.(check string) "the plain one" "plain" b;
      Alcotest.(check int) "no delay but the step" t2 t1;
      Alcotest.(check string) "a lone cast as given" "alone" c;
      Alcotest.(check int) "cast at once" (ms 21) t3
  | l -> Alcotest.failf "%d datagrams" (List.length l)

(* {1 Bursts} *)

(* 100 datagrams of 700 bytes in one step, to one destination, with
   bundles of at most 4000 bytes: 5 per bundle, in order, none larger. *)
let burst () =
  let net = Sim.create ~seed:2 () in
  let _r, wire = raw net "r" in
  let b, got = bundled net "b" in
  ignore b;
  let s, _ = bundled ~size:4000 net "s" in
  let msgs = List.init 100 (fun i -> payload i 700) in
  ignore
    (Sim.at net (ms 1) (fun () ->
         List.iter (send s "b") msgs;
         List.iter (send s "r") msgs));
  Sim.run net;
  Alcotest.(check strings) "all, in order" msgs (List.rev_map snd !got);
  let sizes = List.map (fun (_, d) -> String.length d) !wire in
  Alcotest.(check int) "bundles on the wire" 20 (List.length sizes);
  List.iter (fun n -> if n > 4000 then Alcotest.failf "a bundle of %d bytes" n) sizes;
  List.iter
    (fun (_, d) -> if Char.code d.[0] <> Bundle.Wire.magic then Alcotest.fail "not a bundle")
    !wire;
  let st = B.stats s in
  Alcotest.(check int) "bundles sent" 40 st.Bundle.bundles_sent;
  Alcotest.(check int) "bundled" 200 st.bundled;
  Alcotest.(check int) "unbundled" 100 (B.stats b).unbundled

(* Size 0 turns bundling off: one datagram each. *)
let off () =
  let net = Sim.create ~seed:3 () in
  let _r, wire = raw net "r" in
  let s, _ = bundled ~size:0 net "s" in
  ignore
    (Sim.at net (ms 1) (fun () ->
         for i = 1 to 10 do
           send s "r" (payload i 50)
         done));
  Sim.run net;
  Alcotest.(check int) "datagrams" 10 (List.length !wire)

(* A datagram too large to share a bundle goes alone, after what its queue
   held and before what comes next. *)
let large () =
  let net = Sim.create ~seed:4 () in
  let _b, got = bundled net "b" in
  let s, _ = bundled ~size:2000 net "s" in
  let msgs =
    [ payload 1 100; payload 2 300; payload 3 5000; payload 4 100; payload 5 1990; payload 6 10 ]
  in
  ignore (Sim.at net (ms 1) (fun () -> List.iter (send s "b") msgs));
  Sim.run net;
  Alcotest.(check strings) "in order" msgs (List.rev_map snd !got)

(* Closing sends what is held. *)
let close_flushes () =
  let net = Sim.create ~seed:5 () in
  let _b, got = bundled net "b" in
  let s, _ = bundled net "s" in
  ignore
    (Sim.at net (ms 1) (fun () ->
         send s "b" "one";
         send s "b" "two";
         cast s [ "b" ] "three";
         B.close s));
  Sim.run net;
  Alcotest.(check strings) "all" [ "one"; "two"; "three" ] (List.rev_map snd !got)

(* What the caller gives is not the bundle's: the caller may release a
   datagram as soon as [send] or [cast] returns, and its buffer be used again
   before the step ends and the bundle goes out (here the caller's next
   slice of the same pool takes the bytes a released slice leaves, and is
   written over). What goes on the wire is what was given: a lone datagram
   kept as it is holds its own reference, and a bundle holds a copy. *)
let reused_buffers () =
  let net = Sim.create ~seed:7 () in
  let _b, got = bundled net "b" in
  let s, _ = bundled net "s" in
  let pool = Pool.create ~segment_size:8192 ~name:"reused" () in
  let taken = ref [] in
  let give f p =
    let n = String.length p in
    let v = Pool.alloc pool n in
    Cstruct.blit_from_string p 0 (Iovec.cstruct v) 0 n;
    let m = Msg.create [ v ] in
    (match f m with Ok () -> () | Error e -> Alcotest.failf "%a" Transport.pp_error e);
    Msg.release m;
    let w = Pool.alloc pool n in
    Cstruct.memset (Iovec.cstruct w) (Char.code 'X');
    taken := w :: !taken
  in
  let alone = payload 1 300 and many = List.init 5 (fun i -> payload (i + 2) (100 + (200 * i))) in
  ignore (Sim.at net (ms 1) (fun () -> give (fun m -> B.cast s ~dsts:[ "b" ] m) alone));
  ignore (Sim.at net (ms 2) (fun () -> List.iter (give (fun m -> B.send s ~dst:"b" m)) many));
  Sim.run net;
  Alcotest.(check strings) "as given" (alone :: many) (List.rev_map snd !got);
  Alcotest.(check int) "bundled" 5 (B.stats s).Bundle.bundled;
  List.iter Iovec.release !taken

(* Random steps of casts and sends of random sizes to three destinations,
   random bundle sizes: each receiver gets exactly its datagrams, sends in
   the order given and casts in the order given. *)
let random_traces () =
  for seed = 1 to 300 do
    let rng = Random.State.make [| seed |] in
    let net = Sim.create ~seed () in
    let size = if Random.State.int rng 5 = 0 then 0 else 16 + Random.State.int rng 9000 in
    let s, _ = bundled ~size net "s" in
    let rs = Array.init 3 (fun i -> bundled net (Printf.sprintf "r%d" i)) in
    let expect_sends = Array.make 3 [] and expect_casts = Array.make 3 [] in
    let n = ref 0 in
    for step = 1 to 1 + Random.State.int rng 8 do
      let ops = Random.State.int rng 30 in
      let script =
        List.init ops (fun _ ->
            incr n;
            let len =
              1 + Random.State.int rng (if Random.State.int rng 10 = 0 then 12000 else 600)
            in
            let p = payload !n len in
            let p =
              if Random.State.int rng 20 = 0 then String.make 1 (Char.chr Bundle.Wire.magic) ^ p
              else p
            in
            if Random.State.bool rng then begin
              let d = Random.State.int rng 3 in
              expect_sends.(d) <- p :: expect_sends.(d);
              `Send (d, p)
            end
            else begin
              let dsts = List.filter (fun _ -> Random.State.bool rng) [ 0; 1; 2 ] in
              List.iter (fun d -> expect_casts.(d) <- p :: expect_casts.(d)) dsts;
              `Cast (dsts, p)
            end)
      in
      ignore
        (Sim.at net (ms step) (fun () ->
             List.iter
               (function
                 | `Send (d, p) -> send s (Printf.sprintf "r%d" d) p
                 | `Cast (dsts, p) ->
                     if dsts <> [] then cast s (List.map (Printf.sprintf "r%d") dsts) p)
               script))
    done;
    Sim.run net;
    Array.iteri
      (fun d (_, got) ->
        let got = List.rev_map snd !got in
        let is_send p = List.mem p expect_sends.(d) in
        Alcotest.(check strings)
          (Printf.sprintf "seed %d: sends to r%d" seed d)
          (List.rev expect_sends.(d))
          (List.filter is_send got);
        Alcotest.(check strings)
          (Printf.sprintf "seed %d: casts to r%d" seed d)
          (List.rev expect_casts.(d))
          (List.filter (fun p -> not (is_send p)) got))
      rs
  done

(* {1 Hostile bundles} *)

let hdr count =
  Printf.sprintf "%c\001%c%c" (Char.chr Bundle.Wire.magic)
    (Char.chr (count lsr 8))
    (Char.chr (count land 255))

let entry s =
  Printf.sprintf "%c%c%s" (Char.chr (String.length s lsr 8)) (Char.chr (String.length s land 255)) s

let hostile_inputs =
  [
    ("header only", hdr 1);
    ("short header", String.sub (hdr 1) 0 3);
    ("count 0", hdr 0);
    ("count over what is there", hdr 3 ^ entry "ab" ^ entry "cd");
    ("count under what is there", hdr 1 ^ entry "ab" ^ entry "cd");
    ("length past the end", hdr 2 ^ entry "ab" ^ "\000\200cd");
    ("length cut", hdr 2 ^ entry "ab" ^ "\000");
    ("empty datagram", hdr 2 ^ entry "ab" ^ "\000\000");
    ("count 65535, 2 bytes", hdr 65535 ^ entry "a");
    ("other format", "\xc4\002\000\001" ^ entry "a");
  ]

(* A malformed bundle is dropped whole and counted; nothing of it goes up,
   nothing raises, no buffer is kept. A good one goes up. *)
let hostile () =
  let pool = Pool.create ~name:"hostile" () in
  let net = Sim.create ~seed:6 ~pool () in
  let b, got = bundled net "b" in
  let p, _ = raw net "p" in
  let put s =
    let m = Msg.of_string Pool.default s in
    ignore (Sim.send p ~dst:"b" m);
    Msg.release m
  in
  List.iter (fun (_, s) -> put s) hostile_inputs;
  put (hdr 2 ^ entry "good" ^ entry "ones");
  (* A bundle inside a bundle is a datagram: handed up, not opened. *)
  let inner = hdr 1 ^ entry "x" in
  put (hdr 2 ^ entry "ab" ^ entry inner);
  Sim.run net;
  Alcotest.(check strings)
    "only the good bundles" [ "good"; "ones"; "ab"; inner ] (List.rev_map snd !got);
  Alcotest.(check int) "malformed" (List.length hostile_inputs) (B.stats b).malformed;
  Alcotest.(check int) "no buffer kept" 0 (Pool.in_use pool);
  List.iter
    (fun (what, s) ->
      match Bundle.Wire.decode s with Ok _ -> Alcotest.failf "%s decoded" what | Error _ -> ())
    hostile_inputs

(* A handler that raises on one datagram of a bundle loses nothing else. *)
let raising_handler () =
  let pool = Pool.create ~name:"raising" () in
  let net = Sim.create ~seed:7 ~pool () in
  let got = ref [] in
  let h _ =
    {
      B.recv =
        (fun ~src:_ v ->
          let s = Iovec.to_string v in
          Iovec.release v;
          if s = "boom" then failwith "boom";
          got := s :: !got);
      closed = ignore;
    }
  in
  (match B.open_with net "b" h with Ok _ -> () | Error _ -> Alcotest.fail "open b");
  let s, _ = bundled net "s" in
  ignore (Sim.at net (ms 1) (fun () -> List.iter (send s "b") [ "a"; "boom"; "c" ]));
  Sim.run net;
  Alcotest.(check strings) "the others" [ "a"; "c" ] (List.rev !got);
  Alcotest.(check int) "no buffer kept" 0 (Pool.in_use pool)

let wire_round_trip =
  QCheck.Test.make ~count:500 ~name:"wire: decode (encode ds) = ds"
    QCheck.(list_of_size Gen.(1 -- 40) (string_of_size Gen.(1 -- 300)))
    (fun ds ->
      let ds = List.filter (fun d -> d <> "" && Char.code d.[0] <> Bundle.Wire.magic) ds in
      ds = [] || Bundle.Wire.decode (Bundle.Wire.encode ds) = Ok ds)

(* {1 A group} *)

module Group = Consort_group.Group
module G = Group.Make (Sim)

let layers () =
  match Consort_group.Properties.(layers vsync) with
  | Ok l -> l
  | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e

(* Three members; member 0 casts 300 messages in one step, then 300 more
   while member 2 leaves (a flush with bundles in flight). Every member
   delivers each cast once, in order, and the casts went in bundles. *)
let group_burst () =
  let net =
    Sim.create ~seed:8 ~link:{ Sim.default_link with loss = 0.02; jitter = Time.of_ms 1 } ()
  in
  let addrs = [ "m0"; "m1"; "m2" ] in
  let members =
    List.map
      (fun addr ->
        let got = ref [] in
        let cb =
          {
            Group.view = ignore;
            cast = (fun ~origin s -> got := (origin, s) :: !got);
            send = (fun ~origin:_ _ -> ());
            block = ignore;
            flow = ignore;
            exit = ignore;
          }
        in
        match
          G.join ~peers:addrs ~seed:(Hashtbl.hash addr) ~layers:(layers ()) net ~group:"b" ~addr cb
        with
        | Ok g -> (g, got)
        | Error e -> Alcotest.failf "%a" Group.pp_join_error e)
      addrs
  in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.hd members in
  Alcotest.(check int) "one view of 3" 3 (Array.length (G.view g0).Group.members);
  let accepted = ref [] in
  let burst from n =
    for i = from to from + n - 1 do
      let p = payload i (50 + (i * 37 mod 900)) in
      match G.cast g0 p with Ok () -> accepted := p :: !accepted | Error _ -> ()
    done
  in
  burst 0 300;
  Sim.run ~until:(Time.of_sec 4.) net;
  let g2, _ = List.nth members 2 in
  ignore
    (Sim.at net
       (Time.of_sec 4. + Time.of_ms 1)
       (fun () ->
         burst 300 300;
         G.leave g2));
  Sim.run ~until:(Time.of_sec 12.) net;
  let expected = List.rev !accepted in
  Alcotest.(check bool) "most casts accepted" true (List.length expected > 300);
  List.iteri
    (fun i (g, got) ->
      let mine =
        List.rev (List.filter_map (fun (o, s) -> if o = G.me g0 then Some s else None) !got)
      in
      if i < 2 then
        Alcotest.(check strings)
          (Printf.sprintf "member %d delivers every cast once, in order" i)
          expected mine
      else
        (* The leaver delivers a prefix: what was in its last view. *)
        Alcotest.(check strings)
          "the leaver: a prefix"
          (List.filteri (fun j _ -> j < List.length mine) expected)
          mine;
      ignore g)
    members;
  let st = G.bundle_stats g0 in
  if st.Bundle.bundles_sent = 0 || st.bundled < 100 then
    Alcotest.failf "bundles: %a" Bundle.pp_stats st;
  let st1 = G.bundle_stats (fst (List.nth members 1)) in
  if st1.Bundle.unbundled < 100 then Alcotest.failf "member 1: %a" Bundle.pp_stats st1

(* Deliveries as views ([on_bytes]): the bytes are right, and only a
   message reassembled from fragments was copied on its way up. *)
let views () =
  let net = Sim.create ~seed:9 () in
  let addrs = [ "v0"; "v1"; "v2" ] in
  let members =
    List.map
      (fun addr ->
        let got = ref [] in
        let cb =
          {
            Group.view = ignore;
            cast = (fun ~origin:_ _ -> Alcotest.fail "a string delivery");
            send = (fun ~origin:_ _ -> Alcotest.fail "a string delivery");
            block = ignore;
            flow = ignore;
            exit = ignore;
          }
        in
        let on_bytes kind ~origin cs = got := (kind, origin, Cstruct.to_string cs) :: !got in
        match
          G.join ~peers:addrs ~seed:(Hashtbl.hash addr) ~on_bytes ~layers:(layers ()) net ~group:"v"
            ~addr cb
        with
        | Ok g -> (g, got)
        | Error e -> Alcotest.failf "%a" Group.pp_join_error e)
      addrs
  in
  Sim.run ~until:(Time.of_sec 3.) net;
  let g0, _ = List.hd members and g1, _ = List.nth members 1 in
  let small = List.init 50 (fun i -> payload i 1000) in
  let big = payload 999 200_000 in
  List.iter (fun p -> ignore (G.cast g0 p)) small;
  ignore (G.cast g0 big);
  ignore (G.send g0 (G.me g1) "to one");
  Sim.run ~until:(Time.of_sec 8.) net;
  List.iteri
    (fun i (g, got) ->
      if i > 0 then begin
        let casts =
          List.rev
            (List.filter_map
               (fun (k, o, s) -> if k = `Cast && o = G.me g0 then Some s else None)
               !got)
        in
        Alcotest.(check strings) "casts, as views" (small @ [ big ]) casts;
        let sends = List.filter_map (fun (k, _, s) -> if k = `Send then Some s else None) !got in
        Alcotest.(check strings) "the send" (if i = 1 then [ "to one" ] else []) sends;
        Alcotest.(check (pair int int))
          "copied: the fragmented message only" (1, 200_000) (G.copies g)
      end)
    members

(* A delivery as a view allocates the view and nothing else: the
   callback gets its three arguments at once (applied to two of them
   first, as a closure, it took about 11 more words per message, at every
   member). Minor words are counted exactly, over 1,000 deliveries of
   messages made beforehand. *)
let view_words () =
  let pool = Pool.create () in
  let counts = Consort_group.Group_counters.create () in
  let n = 1000 in
  let v = Pool.of_string pool (String.make 1000 'x') in
  let msgs = Array.init n (fun _ -> Msg.of_iovec (Iovec.retain v)) in
  Iovec.release v;
  let got = ref 0 and bytes = ref 0 in
  let f kind ~origin cs =
    if kind = `Cast && origin == "o" then incr got;
    bytes := !bytes + Cstruct.length cs
  in
  let deliver = Consort_group.Group_deliver.bytes ~pool ~counts in
  let w0 = Gc.minor_words () in
  for i = 0 to n - 1 do
    deliver msgs.(i) f `Cast ~origin:"o"
  done;
  let w1 = Gc.minor_words () in
  Alcotest.(check (pair int int)) "delivered, whole" (n, n * 1000) (!got, !bytes);
  let per = (w1 -. w0) /. float n in
  (* The view: 6 words (a Cstruct, and [Cstruct.of_bigarray]'s optional
     arguments); the two reads of the counter are spread over 1,000. *)
  if per > 8. then Alcotest.failf "%.2f minor words per delivery, at most 8 expected" per;
  Alcotest.(check int) "every message released" 0 (Pool.in_use pool)

let () =
  Alcotest.run "bundle"
    [
      ( "wire",
        [
          Alcotest.test_case "a lone datagram goes as given, at once" `Quick lone;
          Alcotest.test_case "a burst shares bundles, in order" `Quick burst;
          Alcotest.test_case "size 0: no bundling" `Quick off;
          Alcotest.test_case "too large to share: alone, in order" `Quick large;
          Alcotest.test_case "close sends what is held" `Quick close_flushes;
          Alcotest.test_case "the caller's buffers reused before the step ends" `Quick
            reused_buffers;
          Alcotest.test_case "random steps: exact and in order" `Quick random_traces;
          Alcotest.test_case "wire: decode (encode ds) = ds" `Quick (fun () ->
              QCheck.Test.check_exn wire_round_trip);
        ] );
      ( "hostile",
        [
          Alcotest.test_case "malformed bundles dropped whole" `Quick hostile;
          Alcotest.test_case "a raising handler loses nothing else" `Quick raising_handler;
        ] );
      ( "group",
        [
          Alcotest.test_case "bursts, and a flush with bundles in flight" `Quick group_burst;
          Alcotest.test_case "deliveries as views of the received bytes" `Quick views;
          Alcotest.test_case "a delivery as a view allocates the view alone" `Quick view_words;
        ] );
    ]
