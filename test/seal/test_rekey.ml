(* Per-view keys (Rekey) over the deterministic simulator: a member
   excluded from the group, still running, holding the group secret, its
   key pair and every key it ever held, and capturing every datagram, can
   read no payload of the later views and cannot pass a cast to their
   stacks, though its forgery is well made (a member's key makes it pass);
   a member that joins gets the current key and reads; the view's key
   wrapping is bound to its maker, its member and the Install. *)

open Consort
module Sim = Consort_engine.Sim
module Seal = Consort_seal.Seal
module S = Seal.Make (Sim)
module G = Consort_group.Group.Make (S)
module Side = Consort_group.Side
module Crypto = Consort_crypto.Crypto

let secret =
  match Seal.secret_of_string (String.make 32 'k') with Ok s -> s | Error e -> failwith e

let layers =
  match Consort_group.Properties.layers Consort_group.Properties.vsync with
  | Ok l -> l
  | Error _ -> assert false

let contains s sub =
  let n = String.length s and k = String.length sub in
  let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
  go 0

let replace s sub by =
  let n = String.length s and k = String.length sub in
  let rec find i =
    if i + k > n then None else if String.sub s i k = sub then Some i else find (i + 1)
  in
  match find 0 with
  | Some i -> Some (String.sub s 0 i ^ by ^ String.sub s (i + k) (n - i - k))
  | None -> None

type member = {
  addr : string;
  t : S.t;
  g : G.t;
  got : string list ref; (* casts delivered, newest first *)
  helds : Seal.held list ref; (* the keys held at each view *)
}

let wall net () = 1_700_000_000. +. Time.to_sec (Sim.now net)

let join ?(rekey = true) ?(on_stack_error = ignore) net ~mode ~peers addr =
  let t =
    S.wrap ~rekey
      ~g:(Crypto.deterministic ("rekey-test-" ^ addr))
      ~wall:(wall net) net
      (Some (secret, mode))
  in
  let got = ref [] and helds = ref [] in
  let cb =
    {
      Consort_group.Group.view = (fun _ -> Option.iter (fun h -> helds := h :: !helds) (S.held t));
      cast = (fun ~origin:_ s -> got := s :: !got);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = ignore;
    }
  in
  match
    G.join ~peers ~seed:(Hashtbl.hash addr) ~on_stack_error ?rekey:(S.rekey t) ~layers t
      ~group:"rekeyed" ~addr cb
  with
  | Ok g -> { addr; t; g; got; helds }
  | Error e -> Alcotest.failf "join %s: %a" addr Consort_group.Group.pp_join_error e

let run net secs = Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec secs)) net
let view_of m = (G.view m.g).Consort_group.Group.vid
let members_of m = Array.to_list (G.view m.g).Consort_group.Group.members

let one_view what ms =
  let v = view_of (List.hd ms) in
  List.iter
    (fun m ->
      if view_of m <> v || List.length (members_of m) <> List.length ms then
        Alcotest.failf "%s: %s is in view %s of %d, not with the others" what m.addr (view_of m)
          (List.length (members_of m)))
    ms

let cast m s =
  match G.cast m.g s with
  | Ok () -> ()
  | Error e -> Alcotest.failf "cast: %a" Consort_group.Group.pp_error e

let delivered m s = List.mem s !(m.got)

(* Every datagram that reaches [m], as captured on the wire; [drop] says
   which to keep from it. *)
let tap ?(drop = fun _ -> false) m capture =
  ignore
    (S.control (G.connection m.g)
       (S.Drop_filter
          (Some
             (fun ~src:_ cs ->
               let s = Cstruct.to_string cs in
               capture := s :: !capture;
               drop s))))

(* The group of p0, p1, p2 and x, then x cut off until the three exclude
   it; x keeps running, alone. *)
let excluded_setup mode =
  let net = Sim.create ~seed:11 () in
  let addrs = [ "p0"; "p1"; "p2"; "x"; "j" ] in
  let ms = List.map (join net ~mode ~peers:addrs) [ "p0"; "p1"; "p2"; "x" ] in
  let capture = ref [] in
  List.iter (fun m -> tap m capture) ms;
  run net 10.;
  one_view "the four form a group" ms;
  let x = List.nth ms 3 and three = List.filteri (fun i _ -> i < 3) ms in
  List.iteri (fun i m -> cast m (Printf.sprintf "BEFORE-%d" i)) ms;
  run net 2.;
  List.iter
    (fun m ->
      List.iteri
        (fun i _ ->
          if not (delivered m (Printf.sprintf "BEFORE-%d" i)) then
            Alcotest.fail "a cast before the exclusion was lost")
        ms)
    ms;
  (* Cut x off; the wire stays with the others. *)
  Sim.partition net [ [ "p0"; "p1"; "p2"; "j"; "wire" ]; [ "x" ] ];
  run net 30.;
  one_view "the three exclude x" three;
  if List.mem (G.me x.g) (members_of (List.hd three)) then Alcotest.fail "x is still in the view";
  (net, three, x, capture)

(* Everything x can do with what it holds: open each captured datagram
   with every key it ever held, and take from each captured Install the
   view key wrapped for it, if any. The payloads it reads. *)
let attack x capture =
  let rk = match S.rekey x.t with Some r -> r | None -> Alcotest.fail "x has no keys" in
  let me = G.me x.g in
  let helds () = !(x.helds) @ Option.to_list (S.held x.t) in
  let stolen = ref 0 in
  List.iter
    (fun d ->
      List.iter
        (fun h ->
          match Seal.open_held h d with
          | Some p when String.length p > 0 && Char.code p.[0] = Side.magic -> (
              match Codec.decode_string Side.codec p with
              | Ok (Side.Install { vid; members; keys; _ } as v) ->
                  List.iter
                    (fun (_, wrapped) ->
                      let maker = Side.installer vid in
                      match List.find_opt (fun (m : Side.member) -> m.eid = maker) members with
                      | Some mk -> (
                          match
                            rk.Consort_group.Group.unwrap ~vid ~me ~context:(Side.context v)
                              ~installer:(maker, mk.pub) wrapped
                          with
                          | Some activate ->
                              activate ();
                              (* A view x is not in. *)
                              if not (List.exists (fun (m : Side.member) -> m.eid = me) members)
                              then incr stolen;
                              Option.iter (fun h -> x.helds := h :: !(x.helds)) (S.held x.t)
                          | None -> ())
                      | None -> ())
                    keys
              | _ -> ())
          | _ -> ())
        (helds ()))
    !capture;
  let read =
    List.concat_map (fun d -> List.filter_map (fun h -> Seal.open_held h d) (helds ())) !capture
  in
  (read, !stolen)

(* The group's log, at Info. *)
let logged = ref []

let () =
  Logs.set_reporter
    {
      Logs.report =
        (fun src _level ~over k msgf ->
          msgf (fun ?header:_ ?tags:_ fmt ->
              Format.kasprintf
                (fun s ->
                  if Logs.Src.name src = "consort.group" then logged := s :: !logged;
                  over ();
                  k ())
                fmt));
    };
  Logs.set_level (Some Logs.Info)

let excluded_cannot_read () =
  logged := [];
  let net, three, x, capture = excluded_setup Seal.Privacy in
  (* The exclusion is logged with its reason, at each of the three. *)
  let xid = G.me x.g in
  List.iter
    (fun m ->
      let me = G.me m.g in
      if
        not
          (List.exists
             (fun l ->
               contains l (me ^ ": " ^ xid ^ " is not in view")
               && contains l ": excluded: "
               && not (contains l "excluded: ."))
             !logged)
      then Alcotest.failf "%s did not log why %s is gone" m.addr xid)
    three;
  List.iteri (fun i m -> cast m (Printf.sprintf "AFTER-%d" i)) three;
  run net 2.;
  List.iter
    (fun m ->
      List.iteri
        (fun i _ ->
          if not (delivered m (Printf.sprintf "AFTER-%d" i)) then
            Alcotest.fail "a cast after the exclusion was lost")
        three)
    three;
  (* A member joins: it gets the current key and reads. *)
  let j = join net ~mode:Seal.Privacy ~peers:[ "p0"; "p1"; "p2"; "j" ] "j" in
  tap j capture;
  run net 15.;
  one_view "j joins the three" (j :: three);
  cast (List.hd three) "JOINED-0";
  cast j "JOINED-j";
  run net 2.;
  List.iter
    (fun m ->
      if not (delivered m "JOINED-0" && delivered m "JOINED-j") then
        Alcotest.failf "%s did not deliver the casts after the join" m.addr)
    (j :: three);
  if delivered j "AFTER-0" || delivered j "BEFORE-0" then
    Alcotest.fail "the joiner was given casts of views before its own";
  (* The counters through the API: what each sent and delivered. *)
  List.iter
    (fun m ->
      let group = List.assoc "group" (G.counters m.g) in
      Alcotest.(check int)
        "group.delivered: each delivery" (List.length !(m.got)) (List.assoc "delivered" group);
      Alcotest.(check bool) "group.sent: its casts" true (List.assoc "sent" group >= 2);
      Alcotest.(check bool)
        "seal.rekeys: a key per view" true
        ((S.stats (G.connection m.g)).Seal.rekeys = List.assoc "views" group))
    three;
  let read, stolen = attack x capture in
  (* The attack is real: with the keys x held, it reads what was cast
     while it was a member. *)
  Alcotest.(check bool)
    "x reads the casts of its own views" true
    (List.exists (fun p -> contains p "BEFORE-1") read);
  Alcotest.(check int) "no key of a view without x unwrapped from a captured Install" 0 stolen;
  List.iter
    (fun p ->
      if contains p "AFTER-" || contains p "JOINED-" then
        Alcotest.failf "x read a payload of a later view (%d bytes)" (String.length p))
    read;
  Alcotest.(check bool)
    "the capture holds the later casts (sealed)" true
    (List.length !capture > 100)

(* With Auth, payloads travel in clear: x sees a later view's datagram,
   changes its cast and seals it under what it holds. *)
let excluded_cannot_inject () =
  let net, three, x, _capture = excluded_setup Seal.Auth in
  let p0 = List.nth three 0 and p1 = List.nth three 1 in
  let intercepted = ref None in
  (* The wire: p1 loses the first copy of a marked cast (the attacker got
     there first), so the forgery would take its place. *)
  let grab marker =
    intercepted := None;
    tap p1 (ref []) ~drop:(fun s ->
        if !intercepted = None && contains s marker then begin
          intercepted := Some s;
          true
        end
        else false)
  in
  let wire =
    match
      Sim.open_ net "wire" (fun _ ->
          { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
    with
    | Ok c -> c
    | Error _ -> Alcotest.fail "wire"
  in
  let inject s =
    let m = Msg.of_string Pool.default s in
    ignore (Sim.send wire ~dst:"p1" m);
    Msg.release m
  in
  let forge marker by =
    grab marker;
    cast p0 marker;
    let rec wait n =
      if !intercepted = None && n > 0 then (
        Sim.run ~max_events:1 net;
        wait (n - 1))
    in
    wait 10_000;
    match !intercepted with
    | None -> Alcotest.fail "the marked cast was never seen"
    | Some d -> (
        (* The stack's datagram as the view's members see it, its cast
           changed. *)
        let plain = String.sub d 42 (String.length d - 42 - 17) in
        match replace plain marker by with
        | Some p -> p
        | None -> Alcotest.fail "the marker is not in the datagram")
  in
  let counter = ref 100L in
  let seal h under p =
    counter := Int64.succ !counter;
    Seal.seal_held h ~under
      ~id:(Crypto.random ~g:(Crypto.deterministic (Int64.to_string !counter)) 16)
      ~counter:!counter
      ~wall_ms:(Int64.of_float (wall net () *. 1000.))
      p
  in
  let forged = forge "ORIGINAL-CAST" "FORGEDXX-CAST" in
  let before = S.stats (G.connection p1.g) in
  (* Under every key x ever held, and under the group secret. *)
  let helds = !(x.helds) @ Option.to_list (S.held x.t) in
  List.iter
    (fun h ->
      Option.iter inject (seal h `View forged);
      Option.iter inject (seal h `Secret forged))
    helds;
  run net 5.;
  let after = S.stats (G.connection p1.g) in
  Alcotest.(check bool) "the cast is delivered (sent again)" true (delivered p1 "ORIGINAL-CAST");
  Alcotest.(check bool) "the forgery is not" false (delivered p1 "FORGEDXX-CAST");
  Alcotest.(check bool)
    "under an old view's key: unknown key" true
    (after.unknown_key - before.unknown_key >= List.length helds);
  Alcotest.(check bool)
    "under the group secret: wrong key" true
    (after.wrong_key - before.wrong_key >= List.length helds);
  one_view "no view change" three;
  (* A stranger's flood under the current view key's id, and under made-up
     ids: dropped, counted, and nothing remembered of it. *)
  let kid = match !intercepted with Some d -> String.sub d 34 8 | None -> "" in
  let before = S.stats (G.connection p1.g) and senders = S.senders (G.connection p1.g) in
  let got_before = List.length !(p1.got) in
  let rng = Random.State.make [| 12 |] in
  let noise n = String.init n (fun _ -> Char.chr (Random.State.int rng 256)) in
  for i = 1 to 2000 do
    inject
      ("\xc5\x03" ^ noise 32
      ^ (if i mod 2 = 0 then kid else noise 8)
      ^ noise (17 + Random.State.int rng 64))
  done;
  run net 1.;
  let after = S.stats (G.connection p1.g) in
  Alcotest.(check int) "under the current id: bad tag" 1000 (after.bad_tag - before.bad_tag);
  Alcotest.(check bool)
    "under made-up ids: unknown key" true
    (after.unknown_key - before.unknown_key >= 1000);
  Alcotest.(check int) "no sender remembered" senders (S.senders (G.connection p1.g));
  Alcotest.(check int) "no delivery" got_before (List.length !(p1.got));
  one_view "no view change" three;
  (* The forgery is well made: under the view's key, which only members
     hold, it passes. *)
  let forged = forge "ORIGINAL-TWO!" "FORGEDXX-TWO!" in
  (match S.held p0.t with Some h -> Option.iter inject (seal h `View forged) | None -> ());
  run net 5.;
  Alcotest.(check bool)
    "a forgery under the current view's key is delivered" true (delivered p1 "FORGEDXX-TWO!")

(* Members with and without per-view keys cannot share a view: they never
   merge, and each says why. *)
let mixed () =
  let net = Sim.create ~seed:5 () in
  let errors = ref [] in
  let on addr e = errors := (addr, Fmt.str "%a" Consort_group.Group.pp_stack_error e) :: !errors in
  let peers = [ "a"; "b"; "c" ] in
  let a = join ~on_stack_error:(on "a") net ~mode:Seal.Privacy ~peers "a" in
  let b = join ~on_stack_error:(on "b") net ~mode:Seal.Privacy ~peers "b" in
  let c = join ~rekey:false ~on_stack_error:(on "c") net ~mode:Seal.Privacy ~peers "c" in
  run net 10.;
  one_view "the two with Rekey" [ a; b ];
  Alcotest.(check int) "the one without is alone" 1 (List.length (members_of c));
  Alcotest.(check bool)
    "it says why" true
    (List.exists
       (fun (w, e) -> w = "c" && contains e "with Rekey, here" && contains e "without Rekey")
       !errors);
  Alcotest.(check bool)
    "and so do the others" true
    (List.exists (fun (w, e) -> w <> "c" && contains e "without Rekey, here") !errors);
  cast a "MIXED";
  run net 2.;
  Alcotest.(check bool) "the group works" true (delivered b "MIXED")

(* The wrapping alone: a key opens only for its member, from its maker,
   in the Install it was made for. *)
let wrapping () =
  let net = Sim.create () in
  let mk name =
    let t = S.wrap ~rekey:true ~g:(Crypto.deterministic name) net (Some (secret, Seal.Privacy)) in
    match S.rekey t with Some r -> r | None -> Alcotest.fail "no keys"
  in
  let a = mk "a" and b = mk "b" and c = mk "c" in
  let open Consort_group.Group in
  let wrapped, _ = a.draw ~vid:"5:a" ~me:"a" ~context:"the install" [ ("b", b.public) ] in
  let w =
    match List.assoc_opt "b" wrapped with Some w -> w | None -> Alcotest.fail "no key for b"
  in
  Alcotest.(check int) "wrapped for b only" 1 (List.length wrapped);
  Alcotest.(check bool)
    "opens for b" true
    (b.unwrap ~vid:"5:a" ~me:"b" ~context:"the install" ~installer:("a", a.public) w <> None);
  Alcotest.(check bool)
    "not for c" true
    (c.unwrap ~vid:"5:a" ~me:"b" ~context:"the install" ~installer:("a", a.public) w = None);
  Alcotest.(check bool)
    "not in another Install" true
    (b.unwrap ~vid:"5:a" ~me:"b" ~context:"another" ~installer:("a", a.public) w = None);
  Alcotest.(check bool)
    "not for another view" true
    (b.unwrap ~vid:"6:a" ~me:"b" ~context:"the install" ~installer:("a", a.public) w = None);
  Alcotest.(check bool)
    "not from another maker" true
    (b.unwrap ~vid:"5:a" ~me:"b" ~context:"the install" ~installer:("a", c.public) w = None);
  Alcotest.(check bool)
    "not altered" true
    (let w' = Bytes.of_string w in
     Bytes.set w' 20 (Char.chr (Char.code w.[20] lxor 1));
     b.unwrap ~vid:"5:a" ~me:"b" ~context:"the install" ~installer:("a", a.public)
       (Bytes.to_string w')
     = None);
  let none, _ = a.draw ~vid:"7:a" ~me:"a" ~context:"" [ ("z", ""); ("y", String.make 32 '\000') ] in
  Alcotest.(check int) "no key for a member without a valid public key" 0 (List.length none)

let () =
  Alcotest.run "rekey"
    [
      ( "excluded",
        [
          Alcotest.test_case "cannot read later views; a joiner can" `Quick excluded_cannot_read;
          Alcotest.test_case "cannot inject into later views" `Quick excluded_cannot_inject;
        ] );
      ( "keys",
        [
          Alcotest.test_case "a wrapped key opens only where it belongs" `Quick wrapping;
          Alcotest.test_case "with and without Rekey: never merged" `Quick mixed;
        ] );
    ]
