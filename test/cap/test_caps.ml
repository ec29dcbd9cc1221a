(* Capabilities, rights and ports. *)
open Consort_cap
open Consort_crypto

let qtest ?(count = 300) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| 42 |]) t)

let g = Crypto.deterministic "test-cap"
let key = Port.Key.generate ~g ()
let port = Port.Key.port key
let secret = Cap.Secret.generate ~g ()
let ok = function Ok x -> x | Error _ -> Alcotest.fail "unexpected Error"
let cap_t = Alcotest.testable Cap.pp Cap.equal
let err_t = Alcotest.testable (fun ppf (e : [ `Capbad | `Denied ]) -> Cap.pp_error ppf e) ( = )

let check_valid ?(need = Rights.none) c =
  Alcotest.(check (result unit err_t)) "valid" (Ok ()) (Cap.validate secret ~port ~need c)

let check_refused e ?(need = Rights.none) c =
  Alcotest.(check (result unit err_t)) "refused" (Error e) (Cap.validate secret ~port ~need c)

let gen_cap =
  QCheck.Gen.(
    map3
      (fun obj rights check -> ok (Cap.v ~port ~obj ~rights:(Rights.of_int_exn rights) ~check))
      (int_bound Cap.max_object) (int_bound 255)
      (string_size ~gen:char (return 16)))

let arb_cap = QCheck.make ~print:Cap.to_string gen_cap

let owner_rules () =
  let o = Cap.owner port ~obj:7 secret in
  Alcotest.(check bool) "owner has all rights" true (Cap.is_owner o);
  check_valid ~need:Rights.all o;
  let r = ok (Cap.restrict o Rights.(union read modify)) in
  Alcotest.(check int)
    "rights narrowed"
    (Rights.to_int Rights.(union read modify))
    (Rights.to_int r.Cap.rights);
  check_valid ~need:Rights.read r;
  check_valid ~need:Rights.(union read modify) r;
  check_refused `Denied ~need:Rights.destroy r;
  check_refused `Denied ~need:Rights.all r;
  Alcotest.check cap_t "local restriction = the server's"
    (Cap.make port ~obj:7 secret Rights.(union read modify))
    r;
  (* A restricted capability cannot be restricted without the server, but
     restricting to what it already has is the identity. *)
  (match Cap.restrict r Rights.read with
  | Error `Needs_server -> ()
  | Ok _ -> Alcotest.fail "restricted capability narrowed without the secret");
  Alcotest.check cap_t "same rights" r (ok (Cap.restrict r Rights.all));
  let rr = Cap.restrict_with_secret secret r Rights.(union read destroy) in
  Alcotest.(check string) "server narrowing" "read" (Rights.to_string rr.Cap.rights);
  check_valid ~need:Rights.read rr

let over_rights () =
  let r = Cap.make port ~obj:9 secret Rights.read in
  (* Claim more rights with the same check: every wider set is refused. *)
  for extra = 0 to 255 do
    let wider = Rights.of_int_exn (extra lor Rights.to_int Rights.read) in
    if not (Rights.equal wider Rights.read) then
      let c = ok (Cap.v ~port ~obj:9 ~rights:wider ~check:r.Cap.check) in
      check_refused `Capbad c
  done;
  (* Claiming the owner's rights with a restricted check is refused too. *)
  check_refused `Capbad (ok (Cap.v ~port ~obj:9 ~rights:Rights.all ~check:r.Cap.check))

let altered () =
  let r = Cap.make port ~obj:1234 secret Rights.(union read create) in
  let raw = Cap.to_raw r in
  (* Flip every bit of the binary form: it either does not decode or is refused. *)
  for i = 0 to (String.length raw * 8) - 1 do
    let b = Bytes.of_string raw in
    Bytes.set b (i / 8) (Char.chr (Char.code raw.[i / 8] lxor (1 lsl (i mod 8))));
    match Cap.of_raw (Bytes.to_string b) with
    | Error _ -> ()
    | Ok c -> (
        match Cap.validate secret ~port ~need:Rights.none c with
        | Error `Capbad -> ()
        | _ -> Alcotest.failf "bit %d flipped: still valid" i)
  done

let forged =
  qtest "random checks are refused" arb_cap (fun c ->
      match Cap.validate secret ~port ~need:Rights.none c with Error `Capbad -> true | _ -> false)

let other_object () =
  let c = Cap.owner port ~obj:1 secret in
  let moved = ok (Cap.v ~port ~obj:2 ~rights:c.Cap.rights ~check:c.Cap.check) in
  check_refused `Capbad moved;
  let other_port = Port.Key.port (Port.Key.generate ~g ()) in
  let elsewhere = ok (Cap.v ~port:other_port ~obj:1 ~rights:c.Cap.rights ~check:c.Cap.check) in
  Alcotest.(check bool)
    "other port refused" true
    (Cap.validate secret ~need:Rights.none elsewhere = Error `Capbad);
  let real_elsewhere = Cap.owner other_port ~obj:1 secret in
  Alcotest.(check bool)
    "port given and different" true
    (Cap.validate secret ~port ~need:Rights.none real_elsewhere = Error `Capbad)

let revocation () =
  let c = Cap.owner port ~obj:3 secret in
  let r = ok (Cap.restrict c Rights.read) in
  let secret' = Cap.Secret.generate ~g () in
  Alcotest.(check bool)
    "owner revoked" true
    (Cap.validate secret' ~need:Rights.none c = Error `Capbad);
  Alcotest.(check bool)
    "restricted revoked" true
    (Cap.validate secret' ~need:Rights.none r = Error `Capbad);
  Alcotest.(check bool)
    "new owner valid" true
    (Cap.validate secret' ~need:Rights.all (Cap.owner port ~obj:3 secret') = Ok ())

let roundtrip_raw =
  qtest "binary round trip" arb_cap (fun c ->
      match Cap.of_raw (Cap.to_raw c) with Ok c' -> Cap.equal c c' | Error _ -> false)

let roundtrip_text =
  qtest "text round trip" arb_cap (fun c ->
      let s = Cap.to_string c in
      String.sub s 0 5 = "cap1:"
      && String.for_all
           (fun ch ->
             ch = ':' || ch = '-' || ch = '_'
             || (ch >= 'a' && ch <= 'z')
             || (ch >= 'A' && ch <= 'Z')
             || (ch >= '0' && ch <= '9'))
           s
      && match Cap.of_string ("  " ^ s ^ "\n") with Ok c' -> Cap.equal c c' | Error _ -> false)

let roundtrip_codec =
  qtest "codec round trip" arb_cap (fun c ->
      match Consort.Codec.decode_string Cap.codec (Consort.Codec.encode_string Cap.codec c) with
      | Ok c' -> Cap.equal c c'
      | Error _ -> false)

let total_text =
  qtest ~count:2000 "text parser is total"
    QCheck.(make ~print:Print.string Gen.(oneof [ string; map (fun s -> "cap1:" ^ s) string ]))
    (fun s ->
      match Cap.of_string s with Ok c -> Cap.to_string c = String.trim s | Error _ -> true)

let total_raw =
  qtest ~count:2000 "binary parser is total"
    QCheck.(make ~print:Print.string Gen.(oneof [ string; string_size (return 40) ]))
    (fun s -> match Cap.of_raw s with Ok c -> Cap.to_raw c = s | Error _ -> true)

let decode_errors () =
  let c = Cap.owner port ~obj:5 secret in
  let raw = Cap.to_raw c in
  let bad what e s =
    match Cap.of_string s with
    | Error e' when e' = e -> ()
    | Error e' -> Alcotest.failf "%s: %a" what Cap.pp_decode_error e'
    | Ok _ -> Alcotest.failf "%s: accepted" what
  in
  let b64 s = Base64.encode_string ~pad:false ~alphabet:Base64.uri_safe_alphabet s in
  bad "version" (`Bad_version 2) ("cap1:" ^ b64 ("\002" ^ String.sub raw 1 39));
  bad "short" (`Bad_length 39) ("cap1:" ^ b64 (String.sub raw 0 39));
  bad "long" (`Bad_length 41) ("cap1:" ^ b64 (raw ^ "x"));
  (match Cap.of_string "cap2:AAAA" with
  | Error (`Bad_text _) -> ()
  | _ -> Alcotest.fail "cap2 accepted");
  (match Cap.of_string "hello" with
  | Error (`Bad_text _) -> ()
  | _ -> Alcotest.fail "hello accepted");
  (match Cap.of_string ("cap1:" ^ b64 raw ^ "=") with
  | Error (`Bad_text _) -> ()
  | _ -> Alcotest.fail "padding accepted");
  (match Cap.of_string ("cap1:" ^ String.map (function '-' -> '+' | c -> c) (b64 raw) ^ "+") with
  | Error _ -> ()
  | Ok _ -> Alcotest.fail "standard alphabet accepted");
  Alcotest.(check int) "text length" 59 (String.length (Cap.to_string c))

let rights_text () =
  List.iter
    (fun s ->
      let r = ok (Rights.of_string s) in
      Alcotest.(check (result int string))
        s
        (Ok (Rights.to_int r))
        (Result.map Rights.to_int (Rights.of_string (Rights.to_string r))))
    [ "read"; "read,modify"; " read , destroy "; "all"; "none"; "0x05"; "admin,r4" ];
  Alcotest.(check string)
    "names" "read,modify"
    (Rights.to_string (ok (Rights.of_string "modify,read")));
  Alcotest.(check bool) "unknown" true (Result.is_error (Rights.of_string "fly"));
  Alcotest.(check bool) "too big" true (Result.is_error (Rights.of_string "256"))

let ports () =
  Alcotest.(check int) "length" 16 (String.length (Port.to_raw port));
  Alcotest.(check bool)
    "port of public" true
    (Port.equal port (Port.of_public (Port.Key.public key)));
  let msg = "locate answer" in
  let s = Port.Key.sign key msg in
  Alcotest.(check bool)
    "verifies" true
    (Port.verify port ~public:(Port.Key.public key) ~signature:s msg);
  Alcotest.(check bool)
    "other message" false
    (Port.verify port ~public:(Port.Key.public key) ~signature:s "other");
  let rogue = Port.Key.generate ~g () in
  let rs = Port.Key.sign rogue msg in
  Alcotest.(check bool)
    "rogue key, its own signature" false
    (Port.verify port ~public:(Port.Key.public rogue) ~signature:rs msg);
  Alcotest.(check bool)
    "rogue signature, real key" false
    (Port.verify port ~public:(Port.Key.public key) ~signature:rs msg);
  Alcotest.(check bool) "garbage" false (Port.verify port ~public:"x" ~signature:"y" msg);
  let k' = ok (Port.Key.of_string (Port.Key.to_string key ^ "\n")) in
  Alcotest.(check bool) "key text round trip" true (Port.equal port (Port.Key.port k'));
  Alcotest.(check bool)
    "bad key text" true
    (Result.is_error (Port.Key.of_string "consort-key-v1:zz"));
  let path = Filename.temp_file "consort-key" "" in
  Sys.remove path;
  Fun.protect
    ~finally:(fun () -> if Sys.file_exists path then Sys.remove path)
    (fun () ->
      let k1 = ok (Port.Key.load_or_create ~g path) in
      let k2 = ok (Port.Key.load_or_create path) in
      Alcotest.(check bool)
        "same key reloaded" true
        (Port.equal (Port.Key.port k1) (Port.Key.port k2));
      Alcotest.(check int) "mode 0600" 0o600 ((Unix.stat path).Unix.st_perm land 0o777);
      Alcotest.(check bool) "no overwrite" true (Result.is_error (Port.Key.save path k1)));
  Alcotest.(check bool)
    "distinct ports" false
    (Port.equal port (Port.Key.port (Port.Key.generate ())))

let tests =
  [
    Alcotest.test_case "owner and restriction" `Quick owner_rules;
    Alcotest.test_case "over-rights refused" `Quick over_rights;
    Alcotest.test_case "altered refused" `Quick altered;
    forged;
    Alcotest.test_case "other object or port refused" `Quick other_object;
    Alcotest.test_case "revocation by new secret" `Quick revocation;
    roundtrip_raw;
    roundtrip_text;
    roundtrip_codec;
    total_text;
    total_raw;
    Alcotest.test_case "decode errors" `Quick decode_errors;
    Alcotest.test_case "rights text" `Quick rights_text;
    Alcotest.test_case "ports and keys" `Quick ports;
  ]
