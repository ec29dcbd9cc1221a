(* Path MTU discovery when ICMP is filtered (RFC 8899, RFC 4821), on the
   in-memory network: a path that silently drops every packet over a size
   (a black hole). The connection completes and finds the size; without
   packetization-layer probing it never gets a full segment through. *)

open Consort

let kb = 1024

(* Every segment over [limit] bytes (TCP header included) vanishes, both
   ways, and nobody says so. *)
let black_hole limit net (module _ : Node.S) =
  Mem.set_drop net (Some (fun ~src:_ ~dst:_ frame -> String.length frame > limit))

let run ?(plpmtud = true) ?(limit = Time.of_sec 3600.) hole n =
  let config = { Tcp.default_config with plpmtud } in
  Transfer.run ~config ~receiver_config:config ~limit ~prelude:(black_hole hole)
    ~impairments:{ Mem.perfect with delay = Time.of_ms 5 }
    ~seed:3 n

let finds hole () =
  let n = 1024 * kb in
  let r = run hole n in
  Logs.app (fun m ->
      m "black hole over %d bytes: path MTU %d after %d probes; %a" hole r.sender.path_mtu
        r.sender.mtu_probes Transfer.pp_result r);
  Alcotest.(check int) "every byte" n r.bytes;
  Alcotest.(check bool)
    (Fmt.str "the size found (%d) fits the path (%d)" r.sender.path_mtu hole)
    true (r.sender.path_mtu <= hole);
  Alcotest.(check bool)
    (Fmt.str "and is within 16 bytes of it (%d)" r.sender.path_mtu)
    true
    (r.sender.path_mtu > hole - 16);
  Alcotest.(check bool) "probes went" true (r.sender.mtu_probes > 0);
  Alcotest.(check bool) (Fmt.str "few timeouts (%d)" r.timeouts) true (r.timeouts <= 3)

let stuck_without () =
  match run ~plpmtud:false ~limit:(Time.of_sec 120.) 1000 (64 * kb) with
  | r ->
      Alcotest.failf "the transfer completed through a black hole without probing: %a"
        Transfer.pp_result r
  | exception Failure msg -> Logs.app (fun m -> m "without probing: %s" msg)

(* An outage of 5 s (every frame lost, both ways) in the middle of a
   transfer: the timeouts it causes look like a black hole and halve the
   segments, but once the path is back the search must grow them back to
   what the path carries (RFC 8899: a black hole sends the search back to
   the base size and up again, not to a ceiling that only goes down). *)
let outage ?(start = Time.of_sec 2.) ?(loss = 0.) ?(seed = 4) () =
  let mtu = 1480 and length = Time.of_sec 5. in
  let stop = start + length in
  let full = ref None and smallest = ref mtu and last = ref 0 in
  let prelude net (module _ : Node.S) =
    let clock = Mem.clock net in
    Mem.set_drop net
      (Some
         (fun ~src:_ ~dst:_ _ ->
           let now = clock.now () in
           now >= start && now < stop));
    Mem.on_frame net (fun now ~src ~dst:_ frame ->
        if src = 1 && now >= start then begin
          let len = String.length frame in
          last := now;
          if now < stop || !full = None then smallest := min !smallest len;
          if now >= stop && !full = None && len > mtu - 16 then full := Some now
        end)
  in
  let r =
    Transfer.run ~prelude ~seed
      ~impairments:
        { Mem.perfect with loss; delay = Time.of_ms 5; rate = Some 1_250_000; queue = 200_000 }
      (24 * 1024 * kb)
  in
  Logs.app (fun m ->
      m "outage of %a at %a: segments down to %d bytes, full size again %a; path MTU %d; %a" Time.pp
        length Time.pp start !smallest
        Fmt.(option ~none:(any "never") Time.pp)
        (Option.map (fun t -> t - stop) !full)
        r.sender.path_mtu Transfer.pp_result r);
  Alcotest.(check bool)
    "the transfer outlived the outage by 10 s" true
    (!last > stop + Time.of_sec 10.);
  Alcotest.(check bool)
    (Fmt.str "the outage shrank the segments (%d)" !smallest)
    true
    (!smallest < mtu / 2);
  (match !full with
  | Some t ->
      Alcotest.(check bool)
        (Fmt.str "full-size segments %a after the outage, within 10 s" Time.pp (t - stop))
        true
        (t - stop <= Time.of_sec 10.)
  | None -> Alcotest.fail "segments never grew back to the path MTU after the outage");
  Alcotest.(check bool)
    (Fmt.str "the path MTU at the end (%d) is the link's, within 16 bytes" r.sender.path_mtu)
    true
    (r.sender.path_mtu > mtu - 16)

(* A black hole at 1000 bytes for the first 3 s, then a path that carries
   the link's 1480: the search closed at the hole opens again when the
   raise timer (here 2 s) runs out, and finds the larger size (RFC 8899
   section 5.2). *)
let raise_timer () =
  let mtu = 1480 and until = Time.of_sec 3. in
  let grown = ref None in
  let prelude net (module _ : Node.S) =
    let clock = Mem.clock net in
    Mem.set_drop net
      (Some (fun ~src:_ ~dst:_ frame -> clock.now () < until && String.length frame > 1000));
    Mem.on_frame net (fun now ~src ~dst:_ frame ->
        if src = 1 && now >= until && !grown = None && String.length frame > mtu - 16 then
          grown := Some now)
  in
  let config = { Tcp.default_config with pmtu_raise = Time.of_sec 2. } in
  let r =
    Transfer.run ~config ~prelude ~seed:5
      ~impairments:{ Mem.perfect with delay = Time.of_ms 5; rate = Some 1_250_000; queue = 200_000 }
      (12 * 1024 * kb)
  in
  Logs.app (fun m ->
      m "black hole lifted at %a: full size again at %a; path MTU %d after %d probes; %a" Time.pp
        until
        Fmt.(option ~none:(any "never") Time.pp)
        !grown r.sender.path_mtu r.sender.mtu_probes Transfer.pp_result r);
  (match !grown with
  | Some t ->
      Alcotest.(check bool)
        (Fmt.str "full size at %a, within 5 s of the hole's end" Time.pp t)
        true
        (t - until <= Time.of_sec 5.)
  | None -> Alcotest.fail "the search never opened again: segments stayed under the old hole");
  Alcotest.(check bool)
    (Fmt.str "the path MTU at the end (%d) is the link's, within 16 bytes" r.sender.path_mtu)
    true
    (r.sender.path_mtu > mtu - 16)

(* The outage at 16 moments of a transfer that also loses 0.5% of its
   frames: a probe lost to that ordinary loss must not close the search
   below the path MTU (RFC 8899 MAX_PROBES); with one loss taken as too
   big, the outage at 3.555 s leaves the segments at 1448 bytes (at 2.322 s
   before PRR and the timestamp undo changed the windows). *)
let outages_under_loss () =
  for seed = 1 to 16 do
    outage ~start:(Time.of_ms (1500 + (137 * seed))) ~loss:0.005 ~seed ()
  done

let tests =
  [
    Alcotest.test_case "a black hole at 1000 bytes: found, the transfer completes" `Quick
      (finds 1000);
    Alcotest.test_case "a black hole at 600 bytes" `Quick (finds 600);
    Alcotest.test_case "a black hole at 1400 bytes (just under the link's)" `Quick (finds 1400);
    Alcotest.test_case "without probing, nothing gets through a black hole" `Quick stuck_without;
    Alcotest.test_case "after a 5 s outage, segments grow back to the path MTU" `Quick
      (outage ?start:None ?loss:None ?seed:None);
    Alcotest.test_case "the same at 16 moments, with 0.5% loss besides" `Quick outages_under_loss;
    Alcotest.test_case "a black hole that goes: the raise timer finds the larger size" `Quick
      raise_timer;
  ]
