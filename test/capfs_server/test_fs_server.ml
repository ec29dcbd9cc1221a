(* The file server's handler: Bullet operations through capabilities, and
   every way a capability can be wrong. *)

open Consort_cap
open Consort_crypto
module Store = Consort_capfs.Store
module S = Consort_capfs_server.Fs_server
module C = Consort_capfs_server.Fs_client
module P = Consort_capfs_server.Fs_proto
open Consort_local

let now = ref 0

let with_server f =
  let d = Filename.temp_file "capfs" "" in
  Sys.remove d;
  Fun.protect
    ~finally:(fun () -> rm_rf d)
    (fun () ->
      let store, _ =
        match Store.open_ ~clock:(fun () -> !now) d with
        | Ok x -> x
        | Error _ -> Alcotest.fail "open"
      in
      let key = Port.Key.generate ~g:(Crypto.deterministic "capfs-test") () in
      let srv = S.create store (Port.Key.port key) in
      let trans ~idempotent:_ h d = Ok (S.handle srv h d) in
      Fun.protect ~finally:(fun () -> Store.close store) (fun () -> f srv trans))

let get = function Ok x -> x | Error e -> Alcotest.failf "%a" C.pp_error e

let refused name st = function
  | Error (`Refused st') when Status.equal st st' -> ()
  | Error e -> Alcotest.failf "%s: expected %a, got %a" name Status.pp st C.pp_error e
  | Ok _ -> Alcotest.failf "%s: expected %a, got a success" name Status.pp st

let put trans server s =
  let pos = ref 0 in
  C.put trans ~server ~size:(String.length s) (fun b off len ->
      let n = min len (String.length s - !pos) in
      Bytes.blit_string s !pos b off n;
      pos := !pos + n;
      n)

let get_all trans cap =
  let b = Buffer.create 16 in
  Result.map (fun _ -> Buffer.contents b) (C.get trans cap (Buffer.add_string b))

let rights s = Result.get_ok (Rights.of_string s)

let test_files () =
  with_server @@ fun srv trans ->
  let server = S.server_cap srv in
  let f = get (put trans server "hello") in
  Alcotest.(check string) "get" "hello" (get (get_all trans f));
  Alcotest.(check int) "size" 5 (get (C.size trans f));
  Alcotest.(check string) "info" "- 5 bytes" (get (C.info trans f));
  Alcotest.(check string) "server info" "consort file server" (get (C.info trans server));
  let big = String.init ((3 * C.chunk) + 17) (fun i -> Char.chr (i * 7 land 255)) in
  let g = get (put trans server big) in
  Alcotest.(check bool) "a large file, in chunks" true (get (get_all trans g) = big);
  let exact = String.make (2 * C.chunk) 'e' in
  let e = get (put trans server exact) in
  Alcotest.(check int) "a whole number of chunks" (2 * C.chunk) (get (C.size trans e));
  let z = get (put trans server "") in
  Alcotest.(check string) "an empty file" "" (get (get_all trans z));
  get (C.destroy trans f);
  refused "a destroyed file" `Notfound (C.size trans f);
  Alcotest.(check bool) "status" true (String.length (get (C.status trans server)) > 0)

let test_bullet_over_rpc () =
  with_server @@ fun srv trans ->
  let server = S.server_cap srv in
  let call cap cmd ?offset ?size ?extra data =
    S.handle srv (Header.request ?offset ?size ?extra cap cmd) data
  in
  let cap_of (h, _) = Result.get_ok (Header.cap (h : Header.t)) in
  let r = call server P.bs_create ~extra:0 "draft" in
  Alcotest.(check bool) "create uncommitted" true (Status.equal (fst r).status `Ok);
  let u = cap_of r in
  refused "an uncommitted file is unreadable" `Notnow (C.read trans u ~off:0 ~len:10);
  Alcotest.(check string) "info" "- uncommitted" (get (C.info trans u));
  let r = call u P.bs_modify ~offset:5 ~extra:(P.flags ~commit:true ~safe:true) "!" in
  Alcotest.(check bool) "in place" true (Cap.equal (cap_of r) u);
  Alcotest.(check string) "committed" "draft!" (get (get_all trans u));
  let r = call u P.bs_insert ~offset:0 ~extra:(P.flags ~commit:true ~safe:false) ">" in
  let v = cap_of r in
  Alcotest.(check bool) "a committed file gives a new one" false (Cap.equal v u);
  Alcotest.(check string) "new" ">draft!" (get (get_all trans v));
  Alcotest.(check string) "old" "draft!" (get (get_all trans u));
  let r = call v P.bs_delete ~offset:1 ~size:5 ~extra:0 "" in
  let w = cap_of r in
  ignore (call w P.bs_commit ~extra:(P.flags ~commit:true ~safe:true) "");
  Alcotest.(check string) "delete then commit" ">!" (get (get_all trans w));
  let st (h, _) = (h : Header.t).status in
  Alcotest.(check string)
    "unknown command" "STD_COMBAD"
    (Status.to_string (st (call w 4242 "")) |> fun s -> String.sub s 0 10);
  Alcotest.(check bool)
    "a read too large" true
    (Status.equal (st (call w P.bs_read ~size:(P.max_read + 1) "")) `Argbad);
  Alcotest.(check bool) "create on a file" true (Status.equal (st (call w P.bs_create "x")) `Argbad);
  Alcotest.(check bool)
    "read of the server" true
    (Status.equal (st (call server P.bs_read ~size:1 "")) `Argbad)

let test_rights () =
  with_server @@ fun srv trans ->
  let server = S.server_cap srv in
  let f = get (put trans server "secret data") in
  let r = get (C.restrict trans f (rights "read")) in
  Alcotest.(check string) "read with read" "secret data" (get (get_all trans r));
  refused "destroy with read" `Denied (C.destroy trans r);
  let h, _ = S.handle srv (Header.request ~extra:0 r P.bs_modify) "x" in
  Alcotest.(check bool) "modify with read" true (Status.equal h.status `Denied);
  let none = get (C.restrict trans r Rights.none) in
  Alcotest.(check bool)
    "std_restrict of a restricted capability" true
    (Rights.equal none.rights Rights.none);
  refused "read with none" `Denied (C.size trans none);
  Alcotest.(check string) "info needs no right" "- 11 bytes" (get (C.info trans none));
  let rs = get (C.restrict trans r (rights "read,destroy")) in
  Alcotest.(check bool) "restrict never widens" true (Rights.equal rs.rights (rights "read"));
  (* A restricted capability with its rights raised: the check no longer fits. *)
  let widened = Result.get_ok (Cap.v ~port:r.port ~obj:r.obj ~rights:Rights.all ~check:r.check) in
  refused "widened" `Capbad (C.destroy trans widened);
  let forged =
    Result.get_ok (Cap.v ~port:f.port ~obj:f.obj ~rights:Rights.all ~check:(String.make 16 'x'))
  in
  refused "forged check" `Capbad (C.size trans forged);
  let flipped =
    let c = Bytes.of_string f.check in
    Bytes.set c 0 (Char.chr (Char.code (Bytes.get c 0) lxor 1));
    Result.get_ok (Cap.v ~port:f.port ~obj:f.obj ~rights:f.rights ~check:(Bytes.to_string c))
  in
  refused "one bit of the check" `Capbad (C.size trans flipped);
  let g = get (put trans server "other") in
  let moved = Result.get_ok (Cap.v ~port:f.port ~obj:g.obj ~rights:f.rights ~check:f.check) in
  refused "another object's check" `Capbad (C.size trans moved);
  let other_port = Port.Key.port (Port.Key.generate ~g:(Crypto.deterministic "elsewhere") ()) in
  let foreign =
    Cap.owner other_port ~obj:f.obj (Cap.Secret.generate ~g:(Crypto.deterministic "s") ())
  in
  refused "another port" `Capbad (C.size trans foreign);
  let reader_server = get (C.restrict trans server (rights "read")) in
  refused "create without the create right" `Denied (put trans reader_server "x");
  refused "age without admin" `Denied
    (C.age trans (get (C.restrict trans server (rights "create"))));
  refused "no such object" `Notfound
    (C.size trans (Cap.owner f.port ~obj:999 (Cap.Secret.generate ())));
  (* Revocation: a new secret, every old capability fails. *)
  ignore (Store.revoke (S.store srv) f.obj);
  refused "revoked owner" `Capbad (C.size trans f);
  refused "revoked restricted" `Capbad (C.size trans r);
  Alcotest.(check string)
    "a new owner capability works" "secret data"
    (get (get_all trans (Option.get (S.file_cap srv f.obj))));
  (* The same by BS_REVOKE, with the secret the client chose. *)
  let f = Option.get (S.file_cap srv f.obj) in
  let r = get (C.restrict trans f (rights "read")) in
  let all_but_admin = get (C.restrict trans f (rights "read,create,modify,destroy,r4,r5,r6")) in
  let s1 = Cap.Secret.generate ~g:(Crypto.deterministic "revoke-1") () in
  refused "revoke with a restricted capability" `Denied (C.revoke trans r s1);
  refused "revoke without every right" `Denied (C.revoke trans all_but_admin s1);
  refused "revoke with a forged capability" `Capbad (C.revoke trans flipped s1);
  let f1 = get (C.revoke trans f s1) in
  Alcotest.(check bool)
    "the owner capability of the chosen secret" true
    (Cap.equal f1 (Cap.owner f.port ~obj:f.obj s1));
  refused "revoked by BS_REVOKE: owner" `Capbad (C.size trans f);
  refused "revoked by BS_REVOKE: restricted" `Capbad (C.size trans r);
  Alcotest.(check string) "the new capability reads" "secret data" (get (get_all trans f1));
  (* Sent again (its reply lost): answered as done, nothing changes. *)
  Alcotest.(check bool) "a resent revoke" true (Cap.equal f1 (get (C.revoke trans f s1)));
  Alcotest.(check string) "still readable" "secret data" (get (get_all trans f1));
  (* Another secret with the old capability: refused. *)
  refused "the old capability cannot revoke again" `Capbad
    (C.revoke trans f (Cap.Secret.generate ~g:(Crypto.deterministic "revoke-2") ()));
  let bad = S.handle srv (Header.request f1 P.bs_revoke) "short" in
  Alcotest.(check bool)
    "a secret of the wrong length" true
    (Status.equal (fst bad).Header.status `Argbad);
  (* The server's own capability: the old one creates nothing any more. *)
  let s2 = Cap.Secret.generate ~g:(Crypto.deterministic "revoke-3") () in
  let server' = get (C.revoke trans server s2) in
  refused "create with a revoked server capability" `Capbad (put trans server "x");
  Alcotest.(check string)
    "create with the new one" "x"
    (get (get_all trans (get (put trans server' "x"))))

(* Every request the client calls idempotent is carried out twice (as when
   its reply is lost and it is sent again): a put still makes one file. *)
let test_resent () =
  with_server @@ fun srv trans ->
  let twice ~idempotent h d =
    let r = S.handle srv h d in
    if idempotent then Ok (S.handle srv h d) else Ok r
  in
  let server = S.server_cap srv in
  let big = String.init ((2 * C.chunk) + 5) (fun i -> Char.chr (i land 255)) in
  let f = get (put twice server big) in
  Alcotest.(check (list int)) "one file" [ f.obj ] (Store.files (S.store srv));
  Alcotest.(check bool) "whole" true (get (get_all twice f) = big);
  let g = get (put twice server "small") in
  Alcotest.(check int) "two files" 2 (List.length (Store.files (S.store srv)));
  Alcotest.(check string) "small" "small" (get (get_all trans g));
  let s1 = Cap.Secret.generate ~g:(Crypto.deterministic "resent-revoke") () in
  let g' = get (C.revoke twice g s1) in
  Alcotest.(check string)
    "revoked twice: the second is answered as done" "small"
    (get (get_all trans g'))

let test_age () =
  with_server @@ fun srv trans ->
  let server = S.server_cap srv in
  let h, _ = S.handle srv (Header.request ~extra:0 server P.bs_create) "idle" in
  let u = Result.get_ok (Header.cap h) in
  now := !now + Consort.Time.of_sec 3600.;
  get (C.age trans server);
  refused "gone" `Notfound (C.info trans u)

(* Pipelined reads: lanes whose replies come back in any order (here the
   latest request first); the output is in order and whole, at most one read
   per lane is outstanding; a lane that fails mid-file cuts it short; a read
   shorter than asked is a bad reply. *)
let test_pipelined () =
  with_server @@ fun srv trans ->
  let server = S.server_cap srv in
  let n = (2 * P.max_read) + (P.max_read / 2) + 7 in
  let data = String.init n (fun i -> Char.chr (i * 7 lxor (i lsr 13) land 255)) in
  let pos = ref 0 in
  let input b off len =
    let k = min len (n - !pos) in
    Bytes.blit_string data !pos b off k;
    pos := !pos + k;
    k
  in
  let cap = get (C.put trans ~server ~size:n input) in
  let pending = ref [] and most = ref 0 in
  let lane ?(fail = fun _ -> None) ?(alter = Fun.id) () ~idempotent:_ h d k =
    pending := (h, d, k, fail, alter) :: !pending;
    most := max !most (List.length !pending)
  in
  let run cond =
    while not (cond ()) do
      match !pending with
      | [] -> Alcotest.fail "nothing outstanding and not done"
      | (h, d, k, fail, alter) :: rest -> (
          pending := rest;
          match fail (h : Header.t) with
          | Some e -> k (Error e)
          | None ->
              let rh, rd = S.handle srv h d in
              k (Ok (rh, alter rd)))
    done
  in
  let read lanes =
    let b = Buffer.create n in
    let r = C.get_pipelined lanes ~run cap (Buffer.add_string b) in
    (r, Buffer.contents b)
  in
  let r, out = read [| lane (); lane (); lane () |] in
  Alcotest.(check int) "size" n (get r);
  Alcotest.(check bool) "whole and in order" true (out = data);
  Alcotest.(check int) "one read per lane at most" 3 !most;
  (* The read at offset max_read fails: only the first read is written. *)
  let fail (h : Header.t) =
    if h.command = P.bs_read && h.offset = P.max_read then Some (`Failure "gone") else None
  in
  let r, out = read [| lane (); lane ~fail (); lane () |] in
  (match r with
  | Error (`Cut (k, `Failure _)) -> Alcotest.(check int) "cut after the first read" P.max_read k
  | Error e -> Alcotest.failf "expected a cut, got %a" C.pp_error e
  | Ok _ -> Alcotest.fail "expected a cut");
  Alcotest.(check bool) "a prefix" true (out = String.sub data 0 P.max_read);
  (* The same with the sequential get. *)
  let failing ~idempotent h d =
    match fail h with Some e -> Error e | None -> trans ~idempotent h d
  in
  (match C.get failing cap ignore with
  | Error (`Cut (k, `Failure _)) ->
      Alcotest.(check int) "sequential: cut after the first read" P.max_read k
  | _ -> Alcotest.fail "sequential get: expected a cut");
  pending := [];
  let alter d = if String.length d > 1 then String.sub d 1 (String.length d - 1) else d in
  (match read [| lane ~alter (); lane ~alter () |] with
  | Error (`Bad_reply _), _ -> ()
  | _ -> Alcotest.fail "a short read accepted");
  pending := [];
  (* Refused: a capability without the read right. *)
  let blind = Result.get_ok (Cap.restrict cap Rights.none) in
  (match C.get_pipelined [| lane () |] ~run blind ignore with
  | Error (`Refused st) when Status.equal st `Denied -> ()
  | _ -> Alcotest.fail "read without the right");
  (* An empty file. *)
  pos := 0;
  let empty = get (C.put trans ~server ~size:0 (fun _ _ _ -> 0)) in
  match
    C.get_pipelined
      [| lane (); lane () |]
      ~run empty
      (fun _ -> Alcotest.fail "output for an empty file")
  with
  | Ok 0 -> ()
  | _ -> Alcotest.fail "empty file"

let () =
  Alcotest.run "fs_server"
    [
      ( "handler",
        [
          Alcotest.test_case "files" `Quick test_files;
          Alcotest.test_case "Bullet operations" `Quick test_bullet_over_rpc;
          Alcotest.test_case "capabilities and rights" `Quick test_rights;
          Alcotest.test_case "std_age" `Quick test_age;
          Alcotest.test_case "resent requests" `Quick test_resent;
          Alcotest.test_case "pipelined reads" `Quick test_pipelined;
        ] );
    ]
