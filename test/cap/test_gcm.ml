(* The secure wire's AES-256-GCM (OpenSSL through Consort_crypto.Gcm) against
   mirage-crypto's, byte for byte, both ways; and its refusals. *)

module Gcm = Consort_crypto.Gcm
module M = Mirage_crypto.Cipher_block.AES.GCM

let hex s =
  String.concat "" (List.init (String.length s) (fun i -> Printf.sprintf "%02x" (Char.code s.[i])))

let bytes st n = String.init n (fun _ -> Char.chr (Random.State.int st 256))

(* Lengths that cross the block and the stub's paths: 0, under a block,
   exact blocks, and large ones up to a 64 KB fragment and past it. *)
let size st =
  match Random.State.int st 6 with
  | 0 -> 0
  | 1 -> Random.State.int st 16
  | 2 -> 16 * (1 + Random.State.int st 8)
  | 3 -> Random.State.int st 2048
  | _ -> Random.State.int st 70_000

(* A buffer holding [s] at a random offset inside a larger one. *)
let at_offset st s =
  let pre = Random.State.int st 40 and post = Random.State.int st 40 in
  let b = Cstruct.create (pre + String.length s + post) in
  Cstruct.blit_from_string s 0 b pre (String.length s);
  Cstruct.sub b pre (String.length s)

let interop () =
  let st = Random.State.make [| 9; 13 |] in
  for round = 1 to 300 do
    let secret = bytes st 32 and nonce = bytes st 12 in
    let adata = bytes st (if Random.State.bool st then 16 else Random.State.int st 40) in
    let msg = bytes st (size st) in
    let ours = Gcm.of_secret secret and theirs = M.of_secret (Cstruct.of_string secret) in
    let by_us = Gcm.seal ours ~nonce ~adata (at_offset st msg) in
    let by_them =
      M.authenticate_encrypt ~key:theirs ~nonce:(Cstruct.of_string nonce)
        ~adata:(Cstruct.of_string adata) (Cstruct.of_string msg)
    in
    if not (Cstruct.equal by_us by_them) then
      Alcotest.failf "round %d, %d bytes: OpenSSL and mirage-crypto seal differently" round
        (String.length msg);
    (* each opens what the other sealed *)
    (match Gcm.open_ ours ~nonce ~adata (at_offset st (Cstruct.to_string by_them)) with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: OpenSSL does not open mirage-crypto's" round);
    (match
       M.authenticate_decrypt ~key:theirs ~nonce:(Cstruct.of_string nonce)
         ~adata:(Cstruct.of_string adata) by_us
     with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: mirage-crypto does not open OpenSSL's" round);
    (* a flipped bit anywhere (ciphertext or tag) is refused by both *)
    let sealed = Cstruct.to_string by_us in
    let i = Random.State.int st (String.length sealed) in
    let b = Bytes.of_string sealed in
    Bytes.set b i (Char.chr (Char.code sealed.[i] lxor (1 lsl Random.State.int st 8)));
    let bad = Bytes.to_string b in
    if Gcm.open_ ours ~nonce ~adata (Cstruct.of_string bad) <> None then
      Alcotest.failf "round %d: byte %d altered, opened" round i;
    if
      M.authenticate_decrypt ~key:theirs ~nonce:(Cstruct.of_string nonce)
        ~adata:(Cstruct.of_string adata) (Cstruct.of_string bad)
      <> None
    then Alcotest.failf "round %d: mirage-crypto opened the altered one" round;
    (* other additional data, other nonce, other key *)
    if Gcm.open_ ours ~nonce ~adata:(adata ^ "x") by_us <> None then
      Alcotest.failf "round %d: other adata opened" round;
    if Gcm.open_ ours ~nonce:(bytes st 12) ~adata by_us <> None then
      Alcotest.failf "round %d: other nonce opened" round;
    if Gcm.open_ (Gcm.of_secret (bytes st 32)) ~nonce ~adata by_us <> None then
      Alcotest.failf "round %d: other key opened" round
  done

(* NIST's AES-256-GCM test cases 13 and 14 (zero key and nonce). *)
let known () =
  let k = Gcm.of_secret (String.make 32 '\000') and nonce = String.make 12 '\000' in
  Alcotest.(check string)
    "empty" "530f8afbc74536b9a963b4f1c4cb738b"
    (hex (Cstruct.to_string (Gcm.seal k ~nonce ~adata:"" Cstruct.empty)));
  Alcotest.(check string)
    "one zero block" "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"
    (hex (Cstruct.to_string (Gcm.seal k ~nonce ~adata:"" (Cstruct.create 16))))

let in_place () =
  let st = Random.State.make [| 4 |] in
  let k = Gcm.of_secret (bytes st 32) and nonce = bytes st 12 and adata = bytes st 16 in
  let msg = bytes st 5000 in
  let buf = Cstruct.create (7 + 5000 + 16) in
  Cstruct.blit_from_string msg 0 buf 7 5000;
  Gcm.seal_into k ~nonce ~adata (Cstruct.sub buf 7 5000) (Cstruct.shift buf 7);
  Alcotest.(check string)
    "sealed in place = sealed apart"
    (Cstruct.to_string (Gcm.seal k ~nonce ~adata (Cstruct.of_string msg)))
    (Cstruct.to_string (Cstruct.shift buf 7));
  Alcotest.(check bool)
    "opened in place" true
    (Gcm.open_into k ~nonce ~adata (Cstruct.shift buf 7) (Cstruct.shift buf 7));
  Alcotest.(check string) "the message back" msg (Cstruct.sub buf 7 5000 |> Cstruct.to_string)

(* A prefix and a body read in place seal as their concatenation does, for
   every split, and mirage-crypto opens the result. *)
let two_pieces () =
  let st = Random.State.make [| 2; 7 |] in
  for round = 1 to 200 do
    let secret = bytes st 32 and nonce = bytes st 12 and adata = bytes st 16 in
    let k = Gcm.of_secret secret in
    let prefix = bytes st (Random.State.int st 300) and body = bytes st (size st) in
    let off = Random.State.int st (String.length body + 1) in
    let len = Random.State.int st (String.length body - off + 1) in
    let msg = prefix ^ String.sub body off len in
    let dst = Cstruct.create (String.length msg + 16 + Random.State.int st 20) in
    Gcm.seal2_into k ~nonce ~adata (at_offset st prefix) body ~off ~len dst;
    let got = Cstruct.sub dst 0 (String.length msg + 16) in
    if not (Cstruct.equal got (Gcm.seal k ~nonce ~adata (Cstruct.of_string msg))) then
      Alcotest.failf "round %d: prefix %d, body %d at %d: not the concatenation's sealing" round
        (String.length prefix) len off;
    let theirs = M.of_secret (Cstruct.of_string secret) in
    match
      M.authenticate_decrypt ~key:theirs ~nonce:(Cstruct.of_string nonce)
        ~adata:(Cstruct.of_string adata) got
    with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: mirage-crypto does not open it" round
  done;
  let k = Gcm.of_secret (String.make 32 'k') and nonce = String.make 12 'n' in
  List.iter
    (fun (off, len) ->
      match
        Gcm.seal2_into k ~nonce ~adata:"" Cstruct.empty "0123456789" ~off ~len (Cstruct.create 100)
      with
      | exception Invalid_argument _ -> ()
      | () -> Alcotest.failf "body range %d+%d of 10 accepted" off len)
    [ (-1, 2); (0, 11); (5, 6); (11, 0); (3, -1) ]

(* Opening in two steps: the head, then the rest into bytes, then the tag. *)
let split () =
  let st = Random.State.make [| 5; 3 |] in
  for round = 1 to 200 do
    let k = Gcm.of_secret (bytes st 32) and nonce = bytes st 12 and adata = bytes st 16 in
    let msg = bytes st (64 + Random.State.int st 20_000) in
    let sealed = Gcm.seal k ~nonce ~adata (Cstruct.of_string msg) in
    let head = Random.State.int st 65 in
    let hdst = Cstruct.create 64 in
    let b = Bytes.make (String.length msg + 10) '?' in
    let pos = Random.State.int st 10 in
    let seen = ref "" in
    let place h =
      seen := Cstruct.to_string h;
      Some (b, pos)
    in
    (match Gcm.open_split k ~nonce ~adata sealed ~head hdst place with
    | `Opened -> ()
    | _ -> Alcotest.failf "round %d: not opened" round);
    Alcotest.(check string) "the head" (String.sub msg 0 head) !seen;
    Alcotest.(check string)
      "the rest in place"
      (String.sub msg head (String.length msg - head))
      (Bytes.sub_string b pos (String.length msg - head));
    (* a flipped bit anywhere, the head, the rest or the tag *)
    let bad = Cstruct.of_string (Cstruct.to_string sealed) in
    let i = Random.State.int st (Cstruct.length bad) in
    Cstruct.set_uint8 bad i (Cstruct.get_uint8 bad i lxor 4);
    (match Gcm.open_split k ~nonce ~adata bad ~head hdst place with
    | `Refused -> ()
    | _ -> Alcotest.failf "round %d: byte %d altered, not refused" round i);
    (match Gcm.open_split k ~nonce ~adata sealed ~head hdst (fun _ -> None) with
    | `Not_placed -> ()
    | _ -> Alcotest.failf "round %d: not placed, yet" round);
    (* the key still opens whole after a split left half done *)
    if Gcm.open_ k ~nonce ~adata sealed = None then
      Alcotest.failf "round %d: the key is left unusable" round
  done;
  let k = Gcm.of_secret (String.make 32 'k') and nonce = String.make 12 'n' in
  let sealed = Gcm.seal k ~nonce ~adata:"" (Cstruct.create 100) in
  let inv name f =
    match f () with exception Invalid_argument _ -> () | _ -> Alcotest.failf "%s: accepted" name
  in
  inv "head past the message" (fun () ->
      ignore
        (Gcm.open_split k ~nonce ~adata:"" sealed ~head:101 (Cstruct.create 200) (fun _ -> None)));
  inv "head past its buffer" (fun () ->
      ignore (Gcm.open_split k ~nonce ~adata:"" sealed ~head:50 (Cstruct.create 49) (fun _ -> None)));
  inv "rest past the bytes" (fun () ->
      ignore
        (Gcm.open_split k ~nonce ~adata:"" sealed ~head:10 (Cstruct.create 10) (fun _ ->
             Some (Bytes.create 95, 6))));
  inv "head written over the source" (fun () ->
      ignore (Gcm.open_split k ~nonce ~adata:"" sealed ~head:10 sealed (fun _ -> None)))

let refusals () =
  let k = Gcm.of_secret (String.make 32 'k') and nonce = String.make 12 'n' in
  let inv name f =
    match f () with exception Invalid_argument _ -> () | _ -> Alcotest.failf "%s: accepted" name
  in
  inv "31-byte key" (fun () -> ignore (Gcm.of_secret (String.make 31 'k')));
  inv "11-byte nonce" (fun () -> ignore (Gcm.seal k ~nonce:"short" ~adata:"" (Cstruct.create 4)));
  inv "short destination" (fun () ->
      Gcm.seal_into k ~nonce ~adata:"" (Cstruct.create 100) (Cstruct.create 115));
  let buf = Cstruct.create 300 in
  inv "overlapping destination" (fun () ->
      Gcm.seal_into k ~nonce ~adata:"" (Cstruct.sub buf 0 100) (Cstruct.shift buf 50));
  inv "short open destination" (fun () ->
      ignore (Gcm.open_into k ~nonce ~adata:"" (Cstruct.create 116) (Cstruct.create 99)));
  for n = 0 to 15 do
    Alcotest.(check bool)
      (Printf.sprintf "%d bytes: shorter than a tag" n)
      true
      (Gcm.open_ k ~nonce ~adata:"" (Cstruct.create n) = None)
  done;
  (* the empty message's tag alone still authenticates *)
  let t = Gcm.seal k ~nonce ~adata:"a" Cstruct.empty in
  Alcotest.(check bool) "empty opens" true (Gcm.open_ k ~nonce ~adata:"a" t <> None);
  Cstruct.set_uint8 t 15 (Cstruct.get_uint8 t 15 lxor 1);
  Alcotest.(check bool) "empty with a bad tag refused" true (Gcm.open_ k ~nonce ~adata:"a" t = None)

(* The group seal's ChaCha20-Poly1305 (OpenSSL) against mirage-crypto's. *)
module Ch = Consort_crypto.Chacha
module MC = Mirage_crypto.Chacha20

let chacha_interop () =
  let st = Random.State.make [| 20; 1305 |] in
  for round = 1 to 300 do
    let secret = Cstruct.of_string (bytes st 32) and nonce = Cstruct.of_string (bytes st 12) in
    let adata =
      if Random.State.int st 4 = 0 then None
      else Some (at_offset st (bytes st (Random.State.int st 2000)))
    in
    (* at least a byte: mirage-crypto 0.10's ChaCha20 crashes on an empty
       message (the group seal never makes one: it adds a marker byte) *)
    let msg = bytes st (max 1 (size st)) in
    let ours = Ch.of_secret secret and theirs = MC.of_secret secret in
    let by_us = Ch.authenticate_encrypt ~key:ours ~nonce ?adata (at_offset st msg) in
    let by_them = MC.authenticate_encrypt ~key:theirs ~nonce ?adata (Cstruct.of_string msg) in
    if not (Cstruct.equal by_us by_them) then
      Alcotest.failf "round %d, %d bytes: OpenSSL and mirage-crypto seal differently" round
        (String.length msg);
    (match
       Ch.authenticate_decrypt ~key:ours ~nonce ?adata (at_offset st (Cstruct.to_string by_them))
     with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: OpenSSL does not open mirage-crypto's" round);
    (match MC.authenticate_decrypt ~key:theirs ~nonce ?adata by_us with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: mirage-crypto does not open OpenSSL's" round);
    let b = Cstruct.of_string (Cstruct.to_string by_us) in
    let i = Random.State.int st (Cstruct.length b) in
    Cstruct.set_uint8 b i (Cstruct.get_uint8 b i lxor (1 lsl Random.State.int st 8));
    if Ch.authenticate_decrypt ~key:ours ~nonce ?adata b <> None then
      Alcotest.failf "round %d: byte %d altered, opened" round i;
    if MC.authenticate_decrypt ~key:theirs ~nonce ?adata b <> None then
      Alcotest.failf "round %d: mirage-crypto opened the altered one" round;
    let other_ad =
      Some
        (Cstruct.of_string (Option.fold ~none:"x" ~some:(fun a -> Cstruct.to_string a ^ "x") adata))
    in
    if Ch.authenticate_decrypt ~key:ours ~nonce ?adata:other_ad by_us <> None then
      Alcotest.failf "round %d: other adata opened" round
  done;
  (* RFC 8439, 2.8.2 *)
  let key = Ch.of_secret (Cstruct.of_string (String.init 32 (fun i -> Char.chr (0x80 + i)))) in
  let nonce = Cstruct.of_string "\007\000\000\000\064\065\066\067\068\069\070\071" in
  let adata = Cstruct.of_string "\080\081\082\083\192\193\194\195\196\197\198\199" in
  let msg =
    "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, \
     sunscreen would be it."
  in
  let sealed = Ch.authenticate_encrypt ~key ~nonce ~adata (Cstruct.of_string msg) in
  Alcotest.(check string)
    "RFC 8439 tag" "1ae10b594f09e26a7e902ecbd0600691"
    (hex (Cstruct.to_string (Cstruct.sub sealed (String.length msg) 16)));
  Alcotest.(check string)
    "RFC 8439 ciphertext starts" "d31a8d34648e60db7b86afbc53ef7ec2"
    (hex (Cstruct.to_string (Cstruct.sub sealed 0 16)));
  (match Ch.authenticate_encrypt ~key ~nonce:(Cstruct.create 8) Cstruct.empty with
  | exception Invalid_argument _ -> ()
  | _ -> Alcotest.fail "8-byte nonce accepted");
  for n = 0 to 15 do
    if Ch.authenticate_decrypt ~key ~nonce (Cstruct.create n) <> None then
      Alcotest.failf "%d bytes opened" n
  done

let tests =
  [
    Alcotest.test_case "ChaCha20-Poly1305: OpenSSL = mirage-crypto" `Quick chacha_interop;
    Alcotest.test_case "OpenSSL = mirage-crypto, both ways, tampering refused" `Quick interop;
    Alcotest.test_case "NIST vectors" `Quick known;
    Alcotest.test_case "in place" `Quick in_place;
    Alcotest.test_case "prefix and body in place" `Quick two_pieces;
    Alcotest.test_case "opened in two steps" `Quick split;
    Alcotest.test_case "bad arguments refused" `Quick refusals;
  ]
