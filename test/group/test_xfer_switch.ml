(* State transfer and stack switching: their codecs, the stack identity,
   and two small groups over the deterministic simulator. *)

open Consort
module Sim = Consort_engine.Sim
module Group = Consort_group.Group
module G = Group.Make (Sim)
module P = Consort_group.Properties
module Xfer = Consort_group.Xfer
module Stack_id = Consort_group.Stack_id

let sec = Time.of_sec
let layers ps = match P.layers ps with Ok l -> l | Error e -> Alcotest.failf "%a" P.pp_error e
let no_flow = List.filter (( <> ) P.Flow) P.vsync

let ctl_codec () =
  let samples =
    [
      Xfer.Hello
        {
          holder = true;
          age = 0;
          prev = "";
          base = "";
          have = 0;
          digest = "";
          snaps = [];
          pos = "";
        };
      Xfer.Hello
        {
          holder = false;
          age = 123456;
          prev = "3:a#1";
          base = "2:a#1";
          have = 4000;
          digest = "0123abcd";
          snaps = [ "2:a#1"; "4:b#2" ];
          pos = "3.7";
        };
      Xfer.Chunk
        {
          base = "7:p0#1";
          digest = String.make 32 'f';
          age = 99;
          total = 1 lsl 30;
          off = 65536;
          data = String.make 3000 'x';
        };
      Xfer.Chunk { base = "7:p0#1"; digest = ""; age = 0; total = 0; off = 0; data = "" };
      Xfer.Ack { base = "1:z"; off = 17 };
      Xfer.Resume { base = "1:z"; off = 1 lsl 40 };
    ]
  in
  List.iter
    (fun m ->
      let s = Codec.encode_string Xfer.ctl_codec m in
      Alcotest.(check bool) "round trip" true (Codec.decode_string Xfer.ctl_codec s = Ok m);
      for cut = 0 to String.length s - 1 do
        Alcotest.(check bool)
          "a truncated message is an error" true
          (Result.is_error (Codec.decode_string Xfer.ctl_codec (String.sub s 0 cut)))
      done)
    samples

let stack_id () =
  let a = Stack_id.of_layers ~params:Params.empty (layers P.vsync) in
  let b = Stack_id.of_layers ~params:Params.empty (layers no_flow) in
  let a' =
    Stack_id.of_layers
      ~params:(Params.set "frag.size" (Params.Int 2000) Params.empty)
      (layers P.vsync)
  in
  let a'' =
    Stack_id.of_layers
      ~params:(Params.set "group.queue" (Params.Int 2000) Params.empty)
      (layers P.vsync)
  in
  Alcotest.(check bool) "other layers, other identity" false (Stack_id.digest a = Stack_id.digest b);
  Alcotest.(check bool)
    "a layer's tunable is part of it" false
    (Stack_id.digest a = Stack_id.digest a');
  Alcotest.(check bool)
    "the runtime's tunables are not" true
    (Stack_id.digest a = Stack_id.digest a'');
  (match Stack_id.of_string (Stack_id.to_string a') with
  | Ok x -> Alcotest.(check bool) "round trip" true (Stack_id.equal x a')
  | Error e -> Alcotest.fail e);
  (match Stack_id.of_string (Stack_id.to_string a') with
  | Ok x -> (
      match Stack_id.resolve x ~base:Params.empty with
      | Ok (l, ps) ->
          Alcotest.(check string)
            "the same layers"
            (Stack.describe (layers P.vsync))
            (Stack.describe l);
          Alcotest.(check int) "its tunables" 2000 (Params.int ps "frag.size")
      | Error e -> Alcotest.fail e)
  | Error e -> Alcotest.fail e);
  List.iter
    (fun s ->
      Alcotest.(check bool)
        (Printf.sprintf "%S is refused" s)
        true
        (Result.is_error (Stack_id.of_string s)))
    [ ""; "gmp:bottom"; "gmp::bottom|"; "gmp:bottom|frag.size"; "gmp:bottom|b=1,a=2" ];
  match Stack_id.of_string "gmp:nosuchlayer:bottom|" with
  | Ok x ->
      Alcotest.(check bool)
        "an unknown layer cannot be built" true
        (Result.is_error (Stack_id.resolve x ~base:Params.empty))
  | Error e -> Alcotest.fail e

let cb ?(views = ref []) ?(casts = ref []) () =
  {
    Group.view = (fun v -> views := v :: !views);
    cast = (fun ~origin:_ s -> casts := s :: !casts);
    send = (fun ~origin:_ _ -> ());
    block = ignore;
    flow = ignore;
    exit = ignore;
  }

let join ?params ?take_state ?install_state ?on_stack_error ?views ?casts net ~layers addr =
  match
    G.join ?params ~seed:(Hashtbl.hash addr) ~peers:[ "a"; "b" ] ?take_state ?install_state
      ?on_stack_error ~layers net ~group:"t" ~addr (cb ?views ?casts ())
  with
  | Ok g -> g
  | Error e -> Alcotest.failf "join: %a" Group.pp_join_error e

let switch_errors () =
  let net = Sim.create ~seed:1 () in
  let g = join net ~layers:(layers P.vsync) "a" in
  (match G.switch g [ Consort_group.Bottom.layer ] with
  | Error (Group.Not_a_stack _) -> ()
  | _ -> Alcotest.fail "a stack without membership is refused");
  (match G.switch g (layers (P.vsync @ [ P.Xfer ])) with
  | Error Group.Changes_xfer -> ()
  | _ -> Alcotest.fail "adding Xfer is refused");
  G.crash g;
  match G.switch g (layers no_flow) with
  | Error Group.Not_running -> ()
  | _ -> Alcotest.fail "after the exit"

(* Two members on stacks of one epoch never merge and both hear why; once
   one switches, the other takes the newer stack and they merge. *)
let incompatible_then_switch () =
  let net = Sim.create ~seed:2 () in
  let errs_a = ref [] and errs_b = ref [] and views_a = ref [] and views_b = ref [] in
  let a =
    join net ~layers:(layers P.vsync) ~views:views_a
      ~on_stack_error:(fun e -> errs_a := e :: !errs_a)
      "a"
  in
  let b =
    join net ~layers:(layers no_flow) ~views:views_b
      ~on_stack_error:(fun e -> errs_b := e :: !errs_b)
      "b"
  in
  Sim.run ~until:(sec 5.) net;
  Alcotest.(check int) "a alone" 1 (Array.length (G.view a).members);
  Alcotest.(check int) "b alone" 1 (Array.length (G.view b).members);
  let incompatible = List.exists (function Group.Incompatible _ -> true | _ -> false) in
  Alcotest.(check bool) "a heard of the other stack" true (incompatible !errs_a);
  Alcotest.(check bool) "b heard of the other stack" true (incompatible !errs_b);
  Alcotest.(check int) "once per peer and stack" 1 (List.length !errs_a);
  (match G.switch b (layers P.vsync) with
  | Ok () -> ()
  | Error e -> Alcotest.failf "%a" Group.pp_switch_error e);
  Sim.run ~until:(sec 12.) net;
  Alcotest.(check int) "merged" 2 (Array.length (G.view a).members);
  Alcotest.(check string) "one view" (G.view a).vid (G.view b).vid;
  Alcotest.(check string) "one stack" (G.stack_id a) (G.stack_id b);
  Alcotest.(check string)
    "the stack b switched to"
    (Stack.describe (layers P.vsync))
    (G.stack_name b);
  (* Then both switch to the stack without Flow, which a asks for. *)
  let before = G.stack_epoch a in
  (match G.switch a (layers no_flow) with
  | Ok () -> ()
  | Error e -> Alcotest.failf "%a" Group.pp_switch_error e);
  Sim.run ~until:(sec 16.) net;
  Alcotest.(check string) "switched, one view" (G.view a).vid (G.view b).vid;
  Alcotest.(check string) "a runs it" (Stack.describe (layers no_flow)) (G.stack_name a);
  Alcotest.(check string) "b runs it" (Stack.describe (layers no_flow)) (G.stack_name b);
  Alcotest.(check int) "one more switch" (before + 1) (G.stack_epoch a);
  Alcotest.(check int) "the same at b" (G.stack_epoch a) (G.stack_epoch b)

(* A state of 3 MB streams to a joiner in many chunks; the casts made
   meanwhile come after it, in order. *)
let large_state () =
  let net = Sim.create ~seed:3 () in
  let big = String.init (3 lsl 20) (fun i -> Char.chr (i * 7 mod 251)) in
  let l = layers (P.vsync @ [ P.Xfer ]) in
  let casts_a = ref [] in
  let a =
    join net ~layers:l ~casts:casts_a
      ~take_state:(fun () -> big ^ string_of_int (List.length !casts_a))
      "a"
  in
  for i = 1 to 5 do
    ignore
      (Sim.at net (i * Time.of_ms 100) (fun () -> ignore (G.cast a (Printf.sprintf "before %d" i))))
  done;
  Sim.run ~until:(sec 2.) net;
  let got = ref None and casts_b = ref [] and order = ref [] in
  let b =
    join net ~layers:l ~casts:casts_b
      ~install_state:(fun s ->
        got := Some s;
        order := "install" :: !order)
      "b"
  in
  (* Casts from a all along the transfer. *)
  for i = 1 to 40 do
    ignore
      (Sim.at net
         (sec 2. + (i * Time.of_ms 25))
         (fun () -> ignore (G.cast a (Printf.sprintf "during %d" i))))
  done;
  Sim.run ~until:(sec 10.) net;
  (match !got with
  | Some s -> Alcotest.(check bool) "the state, whole" true (s = big ^ "5")
  | None -> Alcotest.fail "b installed no state");
  Alcotest.(check bool) "in chunks" true (List.assoc "chunks_received" (G.xfer_counters b) > 100);
  Alcotest.(check (list string))
    "b gets the casts after the state, in order"
    (List.filter (fun s -> String.length s > 6 && String.sub s 0 6 = "during") (List.rev !casts_a))
    (List.rev !casts_b);
  Alcotest.(check bool) "none before the state" false (G.needs_state b)

(* A flood while a large state streams slowly to b: what b holds meanwhile
   stays within xfer.max_held and the flow control windows (the senders
   are slowed down to it, their casts queued, then refused), instead of
   growing with the flood; b then hands it all over, in order. *)
let held_bounded () =
  let net = Sim.create ~seed:4 () in
  let params =
    Result.get_ok
      (Params.of_string "xfer.max_held=65536,xfer.window=2048,xfer.chunk=1024,mflow.window=65536")
  in
  let big = String.make (2 lsl 20) 's' in
  let l = layers (P.vsync @ [ P.Xfer ]) in
  let casts_a = ref [] and casts_b = ref [] in
  let a = join ~params net ~layers:l ~casts:casts_a ~take_state:(fun () -> big) "a" in
  Sim.run ~until:(sec 2.) net;
  let b = join ~params net ~layers:l ~casts:casts_b ~install_state:ignore "b" in
  let body = String.make 1000 'x' and refused = ref 0 and n = ref 0 in
  for i = 1 to 4000 do
    ignore
      (Sim.at net
         (sec 2. + (i * Time.of_ms 1))
         (fun () ->
           match G.cast a (Printf.sprintf "%d %s" !n body) with
           | Ok () -> incr n
           | Error _ -> incr refused))
  done;
  let peak = ref 0 in
  let rec watch () =
    ignore
      (Sim.at net
         (Sim.now net + Time.of_ms 5)
         (fun () ->
           peak := max !peak (List.assoc "held_bytes" (G.xfer_counters b));
           if Sim.now net < sec 20. then watch ()))
  in
  watch ();
  Sim.run ~until:(sec 20.) net;
  Alcotest.(check bool) "b installed the state" false (G.needs_state b);
  Alcotest.(check bool)
    (Printf.sprintf "what b held stayed within bounds (%d bytes)" !peak)
    true
    (!peak <= 65536 + (2 * 65536) + 8192);
  Alcotest.(check bool) "credit held back" true (List.assoc "credit_held" (G.xfer_counters b) > 0);
  Alcotest.(check bool)
    "the state took long enough to matter" true
    (List.assoc "chunks_received" (G.xfer_counters b) >= 2000);
  let since_join =
    List.filteri (fun i _ -> i >= List.length !casts_a - List.length !casts_b) (List.rev !casts_a)
  in
  (* a's casts before the merge went to a alone. *)
  Alcotest.(check bool) "b gets the flood" true (List.length !casts_b >= !n - 10);
  Alcotest.(check bool)
    "every cast a delivered since, in order" true
    (since_join = List.rev !casts_b)

let () =
  Alcotest.run "xfer-switch"
    [
      ( "codecs",
        [
          Alcotest.test_case "state transfer messages round trip; truncated ones are errors" `Quick
            ctl_codec;
          Alcotest.test_case "stack identity: layers and their tunables" `Quick stack_id;
        ] );
      ( "groups",
        [
          Alcotest.test_case "switch refuses what is not a group's stack" `Quick switch_errors;
          Alcotest.test_case "other stacks never merge; a switch makes them one" `Quick
            incompatible_then_switch;
          Alcotest.test_case "a large state streams in chunks, casts after it" `Quick large_state;
          Alcotest.test_case "what a member waiting for the state holds is bounded" `Quick
            held_bounded;
        ] );
    ]
