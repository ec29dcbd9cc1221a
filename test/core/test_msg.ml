(* Messages: push, pull, send, retain, ownership. *)

open Consort
open Util

let h1 = Codec.uint16
let h2 = Codec.(pair varint bool)
let h3 = Codec.string ()

let pull_ok c m =
  match Msg.pull c m with
  | Ok x -> x
  | Error e -> Alcotest.failf "pull %s: %a" (Codec.name c) Codec.pp_error e

let push3 m = m |> Msg.push h1 0xbeef |> Msg.push h2 (300, true) |> Msg.push h3 "top"

let pull3 m =
  let s, m = pull_ok h3 m in
  Alcotest.(check string) "h3" "top" s;
  let p, m = pull_ok h2 m in
  Alcotest.(check (pair int bool)) "h2" (300, true) p;
  let x, m = pull_ok h1 m in
  Alcotest.(check int) "h1" 0xbeef x;
  m

let body_string m =
  let b = Msg.body m in
  let s = Iovecs.to_string b in
  Iovecs.release b;
  s

let wire = Codec.encode_string h3 "top" ^ Codec.encode_string h2 (300, true) ^ "\xbe\xef"

let local_lifo () =
  let pool = fresh_pool () in
  let m = push3 (Msg.of_string pool "payload") in
  Alcotest.(check int) "header_length" (String.length wire) (Msg.header_length m);
  Alcotest.(check int) "length" (String.length wire + 7) (Msg.length m);
  Alcotest.(check string) "bytes" (wire ^ "payload") (Msg.to_string m);
  Alcotest.(check string) "body excludes headers" "payload" (body_string m);
  let m = pull3 m in
  Alcotest.(check int) "headers gone" 0 (Msg.header_length m);
  Alcotest.(check int) "length after pulls" 7 (Msg.length m);
  Alcotest.(check string) "body" "payload" (body_string m);
  Msg.release m;
  no_leaks pool

let over_the_wire () =
  let pool = fresh_pool () in
  let m = push3 (Msg.create (Iovecs.of_string pool "pay" @ Iovecs.of_string pool "load")) in
  let v = Msg.to_iovec pool m in
  Alcotest.(check int) "to_iovec keeps the message" 1 (if Msg.is_live m then 1 else 0);
  Msg.release m;
  Alcotest.(check string) "datagram" (wire ^ "payload") (Iovec.to_string v);
  let r = Msg.of_iovec v in
  Alcotest.(check int) "received: no pushed headers" 0 (Msg.header_length r);
  Alcotest.(check int) "received length" (String.length wire + 7) (Msg.length r);
  let r = pull3 r in
  Alcotest.(check int) "length" 7 (Msg.length r);
  Alcotest.(check string) "body after pulls" "payload" (body_string r);
  Alcotest.(check string) "to_string after pulls" "payload" (Msg.to_string r);
  (* Forwarding: push a new header in front of a received message. *)
  let f = Msg.push h1 7 r in
  Alcotest.(check string) "forwarded" "\x00\x07payload" (Msg.to_string f);
  let dst = Cstruct.create 12 in
  Alcotest.(check int) "blit_to count" 9 (Msg.blit_to f dst 1);
  Alcotest.(check string) "blit_to bytes" "\x00\x00\x07payload\x00\x00" (Cstruct.to_string dst);
  Msg.release f;
  no_leaks pool

let header_split_across_pieces () =
  let pool = fresh_pool () in
  let enc = Codec.encode_string h3 "split-header" in
  let a = String.sub enc 0 4 and b = String.sub enc 4 (String.length enc - 4) in
  let m =
    Msg.create
      (Iovecs.of_string pool a @ Iovecs.of_string pool (b ^ "xy") @ Iovecs.of_string pool "z")
  in
  let s, m = pull_ok h3 m in
  Alcotest.(check string) "split header" "split-header" s;
  Alcotest.(check string) "rest" "xyz" (body_string m);
  let c, m = pull_ok Codec.(fixed_string 3) m in
  Alcotest.(check string) "across two more pieces" "xyz" c;
  Alcotest.(check int) "empty" 0 (Msg.length m);
  Alcotest.(check bool)
    "pull past end" true
    (match Msg.pull h1 m with Error (`Truncated _) -> true | _ -> false);
  Msg.release m;
  no_leaks pool

(* A compressed header: two bytes and varints, written in place and read
   in place, against the same written by a codec; read from a received
   datagram, from headers pushed here, and from a body of several pieces;
   every truncation an error that leaves the message the caller's. *)
let fields_in_place () =
  let pool = fresh_pool () in
  let codec n =
    Codec.custom ~name:"fields"
      ~size:(fun a -> 2 + Codec.varints_size a)
      ~write:(fun w a ->
        Codec.write Codec.uint8 w 0xC8;
        Codec.write Codec.uint8 w 1;
        Codec.write_varints w a)
      ~read:(fun r ->
        ignore (Codec.read Codec.uint8 r);
        ignore (Codec.read Codec.uint8 r);
        let a = Array.make n 0 in
        Codec.read_varints r a;
        a)
  in
  let st = Random.State.make [| 5 |] in
  for _ = 1 to 300 do
    let n = Random.State.int st 6 in
    let a =
      Array.init n (fun _ ->
          match Random.State.int st 3 with
          | 0 -> Random.State.int st 128
          | 1 -> Random.State.full_int st 0x1_0000_0000
          | _ -> Random.State.bits st lsl Random.State.int st 33)
    in
    let expected = Codec.encode_string (codec n) a ^ "body" in
    let mine = Msg.push_fields 0xC8 1 a (Msg.of_string pool "body") in
    Alcotest.(check string) "written" expected (Msg.to_string mine);
    String.iteri
      (fun k c -> Alcotest.(check int) "byte_at" (Char.code c) (Msg.byte_at mine k))
      expected;
    Alcotest.(check int) "byte_at past the end" (-1) (Msg.byte_at mine (String.length expected));
    let check_read what m =
      let b = Array.make n (-1) in
      let m = Msg.pull_fields 2 b m in
      Alcotest.(check (array int)) what a b;
      Alcotest.(check string) (what ^ ": the rest") "body" (Msg.to_string m);
      Msg.release m
    in
    let received = Msg.of_iovec (Msg.to_iovec pool mine) in
    check_read "received" received;
    check_read "pushed here" mine;
    let cut = Random.State.int st (String.length expected + 1) in
    let pieces =
      Msg.create
        (Iovecs.of_string pool (String.sub expected 0 cut)
        @ Iovecs.of_string pool (String.sub expected cut (String.length expected - cut)))
    in
    check_read "in two pieces" pieces;
    (* Truncated: an error, and the message is still the caller's. *)
    let header = String.length expected - 4 in
    for k = 2 to header - 1 do
      let m = Msg.of_iovec (Pool.of_string pool (String.sub expected 0 k)) in
      (match Msg.pull_fields 2 (Array.make n 0) m with
      | _ -> Alcotest.failf "a header cut at %d of %d was read" k header
      | exception Codec.Decode_error (`Truncated _) -> ());
      Alcotest.(check int) "still the caller's" k (Msg.length m);
      Msg.release m
    done
  done;
  let m = Msg.of_string pool "x" in
  Alcotest.check_raises "negative" (Invalid_argument "Codec.varint: negative") (fun () ->
      ignore (Msg.push_fields 0xC8 0 [| -1 |] m));
  Alcotest.check_raises "not a byte" (Invalid_argument "Msg.push_fields: not a byte") (fun () ->
      ignore (Msg.push_fields 256 0 [||] m));
  Alcotest.(check string) "still the caller's" "x" (Msg.to_string m);
  Msg.release m;
  no_leaks pool

(* Received messages share one empty head: headers pushed on one (an
   empty one first, which goes in place) never show in another. *)
let received_heads_apart () =
  let pool = fresh_pool () in
  let recv s = Msg.of_iovec (Pool.of_string pool s) in
  let a = recv "aa" and b = recv "bb" in
  let a = Msg.push Codec.unit () a in
  let a = Msg.push h1 0x4142 a in
  let c = recv "cc" in
  let b = Msg.push h1 0x4344 b in
  let c = Msg.push Codec.unit () c |> Msg.push h1 0x4546 |> Msg.push h1 0x4748 in
  Alcotest.(check string) "first" "ABaa" (Msg.to_string a);
  Alcotest.(check string) "second" "CDbb" (Msg.to_string b);
  Alcotest.(check string) "third" "GHEFcc" (Msg.to_string c);
  let d = recv "dd" in
  Alcotest.(check int) "a new one has no header" 0 (Msg.header_length d);
  Alcotest.(check string) "fourth" "dd" (Msg.to_string d);
  List.iter Msg.release [ a; b; c; d ];
  no_leaks pool

(* A copy to a datagram after every number of bytes pulled: the pieces
   skipped whole, the one pulled into, the rest whole; with a header pushed
   in front again, and at an offset in the destination. *)
let blit_after_pulls () =
  let pool = fresh_pool () in
  let pieces = [ "ab"; "cde"; "f"; "ghij" ] in
  let all = String.concat "" pieces in
  for k = 0 to String.length all do
    let m = Msg.create (List.concat_map (Iovecs.of_string pool) pieces) in
    let m = if k = 0 then m else snd (pull_ok Codec.(fixed_string k) m) in
    let m = Msg.push h1 0x4142 m in
    let want = "AB" ^ String.sub all k (String.length all - k) in
    let dst = Cstruct.of_string (String.make (String.length want + 5) '.') in
    Alcotest.(check int)
      (Printf.sprintf "count after %d pulled" k)
      (String.length want) (Msg.blit_to m dst 3);
    Alcotest.(check string)
      (Printf.sprintf "bytes after %d pulled" k)
      ("..." ^ want ^ "..")
      (Cstruct.to_string dst);
    let v = Msg.to_iovec pool m in
    Alcotest.(check string) (Printf.sprintf "datagram after %d pulled" k) want (Iovec.to_string v);
    Iovec.release v;
    Msg.release m
  done;
  no_leaks pool

(* The pieces of the body after what was pulled, as a delivery sees them:
   the rest of a piece pulled into, then the following pieces whole. *)
let iter_body_pieces () =
  let pool = fresh_pool () in
  let m =
    Msg.create
      (Iovecs.of_string pool "abcdef" @ Iovecs.of_string pool "ghijk" @ Iovecs.of_string pool "lm")
  in
  let pieces m =
    let l = ref [] in
    Msg.iter_body
      (fun buf off len -> l := Cstruct.to_string (Cstruct.of_bigarray buf ~off ~len) :: !l)
      m;
    List.rev !l
  in
  Alcotest.(check (list string)) "nothing pulled" [ "abcdef"; "ghijk"; "lm" ] (pieces m);
  let _, m = pull_ok Codec.(fixed_string 4) m in
  Alcotest.(check (list string)) "4 bytes pulled" [ "ef"; "ghijk"; "lm" ] (pieces m);
  let _, m = pull_ok Codec.(fixed_string 4) m in
  Alcotest.(check (list string)) "8 bytes pulled" [ "ijk"; "lm" ] (pieces m);
  let _, m = pull_ok Codec.(fixed_string 3) m in
  Alcotest.(check (list string)) "a piece pulled whole" [ "lm" ] (pieces m);
  Msg.release m;
  no_leaks pool

(* [body_string] is the body after the pulled headers, as [body] gives it,
   in one copy: across pieces, after pulls inside a piece and of whole
   pieces, with pushed headers left out, and empty; a 16-byte body costs
   its string (4 words) and nothing else. *)
let body_string_one_copy () =
  let pool = fresh_pool () in
  let same what m =
    let b = Msg.body m in
    Alcotest.(check string) what (Iovecs.to_string b) (Msg.body_string m);
    Iovecs.release b
  in
  let m =
    Msg.create
      (Iovecs.of_string pool "abcdef" @ Iovecs.of_string pool "ghijk" @ Iovecs.of_string pool "lm")
  in
  Alcotest.(check string) "nothing pulled" "abcdefghijklm" (Msg.body_string m);
  let _, m = pull_ok Codec.(fixed_string 4) m in
  Alcotest.(check string) "4 bytes pulled" "efghijklm" (Msg.body_string m);
  same "as body, 4 pulled" m;
  let _, m = pull_ok Codec.(fixed_string 8) m in
  Alcotest.(check string) "12 bytes pulled" "m" (Msg.body_string m);
  let _, m = pull_ok Codec.(fixed_string 1) m in
  Alcotest.(check string) "all pulled" "" (Msg.body_string m);
  Msg.release m;
  let m = Msg.push h1 0x1111 (Msg.of_string pool "0123456789abcdef") in
  Alcotest.(check string) "pushed headers left out" "0123456789abcdef" (Msg.body_string m);
  same "as body, pushed" m;
  let w0 = Gc.minor_words () in
  for _ = 1 to 1000 do
    ignore (Sys.opaque_identity (Msg.body_string m))
  done;
  let words = (Gc.minor_words () -. w0) /. 1000. in
  if words > 4.5 then Alcotest.failf "%.1f minor words for 16 bytes (at most 4)" words;
  Msg.release m;
  no_leaks pool

let retained_versions () =
  let pool = fresh_pool () in
  let base = Msg.of_string pool "body" in
  let other = Msg.retain base in
  let a = Msg.push h1 0x1111 base in
  let b = Msg.push h1 0x2222 other in
  Alcotest.(check string) "first version" "\x11\x11body" (Msg.to_string a);
  Alcotest.(check string) "second version" "\x22\x22body" (Msg.to_string b);
  (* Deeper: two versions sharing a pushed header, each pushing more. *)
  let a2 = Msg.retain a in
  let x = Msg.push h3 "xx" a in
  let y = Msg.push h3 "yyyy" a2 in
  let z = Msg.push h1 0x3333 y in
  Alcotest.(check string) "x" "\x02xx\x11\x11body" (Msg.to_string x);
  Alcotest.(check string) "y under z" "\x33\x33\x04yyyy\x11\x11body" (Msg.to_string z);
  let s, x = pull_ok h3 x in
  Alcotest.(check string) "pull x" "xx" s;
  let x = Msg.push h1 0x4444 x in
  Alcotest.(check string) "push after pull" "\x44\x44\x11\x11body" (Msg.to_string x);
  Alcotest.(check string) "z intact" "\x33\x33\x04yyyy\x11\x11body" (Msg.to_string z);
  Alcotest.(check string) "b intact" "\x22\x22body" (Msg.to_string b);
  List.iter Msg.release [ x; z; b ];
  no_leaks pool

(* Shared header bytes are never written: a push in front of them copies, and a message that
   already has headers gets a copy of them. *)
let push_bytes_shared () =
  let pool = fresh_pool () in
  let shared = Bytes.of_string "HDR" in
  let base = Msg.of_string pool "body" in
  let kept = Msg.push_bytes shared (Msg.retain base) in
  let sent = Msg.push h1 0x1111 base in
  Alcotest.(check string) "kept" "HDRbody" (Msg.to_string kept);
  Alcotest.(check string) "sent, in place beside it" "\x11\x11body" (Msg.to_string sent);
  let again = Msg.push h1 0x2222 (Msg.retain kept) in
  Alcotest.(check string) "pushed in front" "\x22\x22HDRbody" (Msg.to_string again);
  let h, rest = pull_ok h1 again in
  Alcotest.(check int) "pulled" 0x2222 h;
  Alcotest.(check string) "rest" "HDRbody" (Msg.to_string rest);
  let on_top = Msg.push_bytes shared sent in
  Alcotest.(check string) "copied in front of headers" "HDR\x11\x11body" (Msg.to_string on_top);
  Alcotest.(check string) "shared bytes unchanged" "HDR" (Bytes.to_string shared);
  List.iter Msg.release [ kept; rest; on_top ];
  no_leaks pool

let retained_versions_prop =
  (* Random sequences of pushes on random live versions: each version's bytes
     always equal its own pushes in front of the body. *)
  let open QCheck in
  let arb =
    make
      ~print:Print.(list (pair int string))
      Gen.(
        list_size (int_range 1 30)
          (pair (int_range 0 100) (string_size ~gen:printable (int_range 0 40))))
  in
  qtest ~count:200 "pushes on retained versions never interfere" arb (fun ops ->
      let pool = fresh_pool () in
      let versions = ref [| (Msg.create ~headroom:16 (Iovecs.of_string pool "B"), "B") |] in
      List.iter
        (fun (i, h) ->
          let vs = !versions in
          let k = i mod Array.length vs in
          let m, expect = vs.(k) in
          let keep = Msg.retain m in
          let m' = Msg.push h3 h m in
          vs.(k) <- (keep, expect);
          versions := Array.append vs [| (m', Codec.encode_string h3 h ^ expect) |])
        ops;
      let ok = Array.for_all (fun (m, e) -> Msg.to_string m = e) !versions in
      Array.iter (fun (m, _) -> Msg.release m) !versions;
      ok && Pool.leak_check pool = 0)

let headroom_growth () =
  let pool = fresh_pool () in
  let m = Msg.create ~headroom:4 (Iovecs.of_string pool "b") in
  let m = Msg.push h1 1 m in
  let m = Msg.push h1 2 m in
  Alcotest.(check string) "fits exactly" "\x00\x02\x00\x01b" (Msg.to_string m);
  let m = Msg.push h3 (String.make 100 'h') m in
  Alcotest.(check int) "grown" (101 + 4) (Msg.header_length m);
  let m = Msg.push h1 3 m in
  Alcotest.(check string)
    "all headers"
    ("\x00\x03\x64" ^ String.make 100 'h' ^ "\x00\x02\x00\x01b")
    (Msg.to_string m);
  let rec pushes m i = if i = 0 then m else pushes (Msg.push h1 i m) (i - 1) in
  let m = pushes m 200 in
  Alcotest.(check int) "many pushes" (105 + 2 + 400) (Msg.header_length m);
  let rec pulls m i =
    if i > 200 then m
    else
      let x, m = pull_ok h1 m in
      Alcotest.(check int) "lifo" i x;
      pulls m (i + 1)
  in
  let m = pulls m 1 in
  let x, m = pull_ok h1 m in
  Alcotest.(check int) "3" 3 x;
  let s, m = pull_ok h3 m in
  Alcotest.(check int) "long header" 100 (String.length s);
  Alcotest.(check string) "rest" "\x00\x02\x00\x01b" (Msg.to_string m);
  Msg.release m;
  no_leaks pool

let ownership () =
  let pool = fresh_pool () in
  let m = Msg.of_string pool "abc" in
  let m2 = Msg.push h1 1 m in
  Alcotest.(check bool) "consumed by push" false (Msg.is_live m);
  raises_uar "push on consumed" (fun () -> Msg.push h1 2 m);
  raises_uar "pull on consumed" (fun () -> Msg.pull h1 m);
  raises_uar "body on consumed" (fun () -> Msg.body m);
  raises_uar "retain on consumed" (fun () -> Msg.retain m);
  raises_uar "release on consumed" (fun () -> Msg.release m);
  (* A failed pull leaves the message with the caller, unchanged. *)
  let refuse = Codec.conv Fun.id (fun _ -> Error "refused") Codec.uint8 in
  Alcotest.(check bool)
    "malformed header" true
    (match Msg.pull refuse m2 with Error (`Malformed _) -> true | _ -> false);
  Alcotest.(check bool)
    "truncated header" true
    (match Msg.pull Codec.(fixed_string 10) m2 with Error (`Truncated _) -> true | _ -> false);
  Alcotest.(check bool) "still live" true (Msg.is_live m2);
  Alcotest.(check string) "unchanged" "\x00\x01abc" (Msg.to_string m2);
  let _, m3 = pull_ok h1 m2 in
  raises_uar "pull consumed" (fun () -> Msg.pull h1 m2);
  Msg.release m3;
  raises_uar "double release" (fun () -> Msg.release m3);
  let e = Msg.empty () in
  Alcotest.(check int) "empty" 0 (Msg.length e);
  Alcotest.(check string) "pp" "<msg 0+0 bytes>" (Fmt.str "%a" Msg.pp e);
  Msg.release e;
  Alcotest.(check int) "default headroom" 64 Msg.default_headroom;
  no_leaks pool

let[@inline never] drop_msg pool =
  ignore (Sys.opaque_identity (Msg.push h1 1 (Msg.of_string pool "x")))

let leaked_message_found () =
  let pool = fresh_pool () in
  drop_msg pool;
  Alcotest.(check int) "leaked body reported" 1 (Pool.leak_check pool)

(* A header pushed here and pulled here (a member's own cast delivered
   locally) is read from one buffer shared by every such pull: two
   messages pulled in turn, a header longer than that buffer was, and a
   failed pull in between must not mix them up. *)
let local_pulls_interleaved () =
  let pool = fresh_pool () in
  let long = String.init 3000 (fun i -> Char.chr (97 + (i mod 26))) in
  let a = Msg.of_string pool "a" |> Msg.push h1 1 |> Msg.push h3 "first" |> Msg.push h3 long in
  let b = Msg.of_string pool "b" |> Msg.push h1 2 |> Msg.push h2 (77, false) in
  let s, a = pull_ok h3 a in
  Alcotest.(check string) "long header" long s;
  let p, b = pull_ok h2 b in
  Alcotest.(check (pair int bool)) "b's h2" (77, false) p;
  let refuse = Codec.conv Fun.id (fun _ -> Error "refused") Codec.uint8 in
  let r = ref None in
  let keep x = r := Some x in
  let take () =
    match !r with
    | Some x ->
        r := None;
        x
    | None -> Alcotest.fail "no result"
  in
  Msg.pull_then refuse b ()
    ~ok:(fun () _ _ -> Alcotest.fail "accepted")
    ~error:(fun _ b -> keep ("", b));
  let _, b = take () in
  Msg.pull_then h3 a () ~ok:(fun () s a -> keep (s, a)) ~error:(fun _ _ -> Alcotest.fail "error");
  let s, a = take () in
  Alcotest.(check string) "a's second header" "first" s;
  Msg.pull_then h1 b ()
    ~ok:(fun () x b -> keep (string_of_int x, b))
    ~error:(fun _ _ -> Alcotest.fail "error");
  let x, b = take () in
  let x = int_of_string x in
  Alcotest.(check int) "b's h1" 2 x;
  let x, a = pull_ok h1 a in
  Alcotest.(check int) "a's h1" 1 x;
  Alcotest.(check string) "a's body" "a" (Msg.to_string a);
  Alcotest.(check string) "b's body" "b" (Msg.to_string b);
  Alcotest.(check bool)
    "past the pushed headers" true
    (match Msg.pull Codec.(fixed_string 10) (Msg.push h1 5 (Msg.empty ())) with
    | Error (`Truncated _) -> true
    | _ -> false);
  Msg.release a;
  Msg.release b;
  no_leaks pool

let tests =
  [
    Alcotest.test_case "local pulls, interleaved and long" `Quick local_pulls_interleaved;
    Alcotest.test_case "push then pull, LIFO" `Quick local_lifo;
    Alcotest.test_case "pull after sending" `Quick over_the_wire;
    Alcotest.test_case "header split across pieces" `Quick header_split_across_pieces;
    Alcotest.test_case "the body's pieces after a pull" `Quick iter_body_pieces;
    Alcotest.test_case "the body as a string, one copy" `Quick body_string_one_copy;
    Alcotest.test_case "copied to a datagram after each pull" `Quick blit_after_pulls;
    Alcotest.test_case "received messages' headers kept apart" `Quick received_heads_apart;
    Alcotest.test_case "compressed fields written and read in place" `Quick fields_in_place;
    Alcotest.test_case "retained versions do not corrupt each other" `Quick retained_versions;
    Alcotest.test_case "pushed bytes are shared, never written" `Quick push_bytes_shared;
    retained_versions_prop;
    Alcotest.test_case "headroom overflow grows" `Quick headroom_growth;
    Alcotest.test_case "ownership moves, use after consume" `Quick ownership;
    Alcotest.test_case "dropped message is a leak" `Quick leaked_message_found;
  ]
