(* The secure wire's AES-256-GCM (OpenSSL through Consort_cap.Gcm) against
   mirage-crypto's, byte for byte, both ways; and its refusals. *)

module Gcm = Consort_cap.Gcm
module M = Mirage_crypto.Cipher_block.AES.GCM

let hex s = String.concat "" (List.init (String.length s) (fun i -> Printf.sprintf "%02x" (Char.code s.[i])))
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
    let by_them = M.authenticate_encrypt ~key:theirs ~nonce:(Cstruct.of_string nonce) ~adata:(Cstruct.of_string adata) (Cstruct.of_string msg) in
    if not (Cstruct.equal by_us by_them) then
      Alcotest.failf "round %d, %d bytes: OpenSSL and mirage-crypto seal differently" round (String.length msg);
    (* each opens what the other sealed *)
    (match Gcm.open_ ours ~nonce ~adata (at_offset st (Cstruct.to_string by_them)) with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: OpenSSL does not open mirage-crypto's" round);
    (match M.authenticate_decrypt ~key:theirs ~nonce:(Cstruct.of_string nonce) ~adata:(Cstruct.of_string adata) by_us with
    | Some p when Cstruct.to_string p = msg -> ()
    | _ -> Alcotest.failf "round %d: mirage-crypto does not open OpenSSL's" round);
    (* a flipped bit anywhere (ciphertext or tag) is refused by both *)
    let sealed = Cstruct.to_string by_us in
    let i = Random.State.int st (String.length sealed) in
    let b = Bytes.of_string sealed in
    Bytes.set b i (Char.chr (Char.code sealed.[i] lxor (1 lsl Random.State.int st 8)));
    let bad = Bytes.to_string b in
    if Gcm.open_ ours ~nonce ~adata (Cstruct.of_string bad) <> None then Alcotest.failf "round %d: byte %d altered, opened" round i;
    if M.authenticate_decrypt ~key:theirs ~nonce:(Cstruct.of_string nonce) ~adata:(Cstruct.of_string adata) (Cstruct.of_string bad) <> None then
      Alcotest.failf "round %d: mirage-crypto opened the altered one" round;
    (* other additional data, other nonce, other key *)
    if Gcm.open_ ours ~nonce ~adata:(adata ^ "x") by_us <> None then Alcotest.failf "round %d: other adata opened" round;
    if Gcm.open_ ours ~nonce:(bytes st 12) ~adata by_us <> None then Alcotest.failf "round %d: other nonce opened" round;
    if Gcm.open_ (Gcm.of_secret (bytes st 32)) ~nonce ~adata by_us <> None then Alcotest.failf "round %d: other key opened" round
  done

(* NIST's AES-256-GCM test cases 13 and 14 (zero key and nonce). *)
let known () =
  let k = Gcm.of_secret (String.make 32 '\000') and nonce = String.make 12 '\000' in
  Alcotest.(check string) "empty" "530f8afbc74536b9a963b4f1c4cb738b" (hex (Cstruct.to_string (Gcm.seal k ~nonce ~adata:"" Cstruct.empty)));
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
  Alcotest.(check string) "sealed in place = sealed apart"
    (Cstruct.to_string (Gcm.seal k ~nonce ~adata (Cstruct.of_string msg)))
    (Cstruct.to_string (Cstruct.shift buf 7));
  Alcotest.(check bool) "opened in place" true (Gcm.open_into k ~nonce ~adata (Cstruct.shift buf 7) (Cstruct.shift buf 7));
  Alcotest.(check string) "the message back" msg (Cstruct.sub buf 7 5000 |> Cstruct.to_string)

let refusals () =
  let k = Gcm.of_secret (String.make 32 'k') and nonce = String.make 12 'n' in
  let inv name f = match f () with exception Invalid_argument _ -> () | _ -> Alcotest.failf "%s: accepted" name in
  inv "31-byte key" (fun () -> ignore (Gcm.of_secret (String.make 31 'k')));
  inv "11-byte nonce" (fun () -> ignore (Gcm.seal k ~nonce:"short" ~adata:"" (Cstruct.create 4)));
  inv "short destination" (fun () -> Gcm.seal_into k ~nonce ~adata:"" (Cstruct.create 100) (Cstruct.create 115));
  let buf = Cstruct.create 300 in
  inv "overlapping destination" (fun () -> Gcm.seal_into k ~nonce ~adata:"" (Cstruct.sub buf 0 100) (Cstruct.shift buf 50));
  inv "short open destination" (fun () -> ignore (Gcm.open_into k ~nonce ~adata:"" (Cstruct.create 116) (Cstruct.create 99)));
  for n = 0 to 15 do
    Alcotest.(check bool) (Printf.sprintf "%d bytes: shorter than a tag" n) true (Gcm.open_ k ~nonce ~adata:"" (Cstruct.create n) = None)
  done;
  (* the empty message's tag alone still authenticates *)
  let t = Gcm.seal k ~nonce ~adata:"a" Cstruct.empty in
  Alcotest.(check bool) "empty opens" true (Gcm.open_ k ~nonce ~adata:"a" t <> None);
  Cstruct.set_uint8 t 15 (Cstruct.get_uint8 t 15 lxor 1);
  Alcotest.(check bool) "empty with a bad tag refused" true (Gcm.open_ k ~nonce ~adata:"a" t = None)

let tests =
  [
    Alcotest.test_case "OpenSSL = mirage-crypto, both ways, tampering refused" `Quick interop;
    Alcotest.test_case "NIST vectors" `Quick known;
    Alcotest.test_case "in place" `Quick in_place;
    Alcotest.test_case "bad arguments refused" `Quick refusals;
  ]
