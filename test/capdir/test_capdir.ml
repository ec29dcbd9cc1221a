(* The directory server's state machine: rights by columns, modify and
   delete rights, atomic installs, sequence numbers, paths, ageing. *)
open Consort_cap
open Consort_crypto
module Dir = Consort_capdir.Dir
module Path = Consort_capdir.Path

let qtest ?(count = 300) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| 14 |]) t)

let g = Crypto.deterministic "test-capdir"
let port = Port.Key.port (Port.Key.generate ~g ())
let fport = Port.Key.port (Port.Key.generate ~g ())
let fsecret = Cap.Secret.generate ~g ()

let lim =
  Dir.default_limits ~port ~server_secret:(Cap.Secret.generate ~g ())
    ~root_secret:(Cap.Secret.generate ~g ())

let r = Rights.of_int_exn
let fresh () = Dir.create lim
let raw_secret () = Cap.Secret.to_raw (Cap.Secret.generate ~g ())
let pp_resp = Fmt.to_to_string Dir.pp_response

let created = function
  | Dir.Created { cap; _ } -> cap
  | x -> Alcotest.failf "expected Created, got %s" (pp_resp x)

let done_ = function Dir.Done s -> s | x -> Alcotest.failf "expected Done, got %s" (pp_resp x)
let is_error p = function Dir.Error e -> p e | _ -> false
let denied = is_error (function Dir.Denied _ -> true | _ -> false)

let mkdir ?(columns = Dir.default_columns) ?link t via =
  created (Dir.execute t (Dir.Create { via; secret = raw_secret (); columns; link }))

let install ?expect t dir rows = Dir.execute t (Dir.Install { dir; expect; rows })
let row ?(masks = [ Rights.all; Rights.all; Rights.all ]) name caps = { Dir.name; masks; caps }

let lookup t dir name =
  match Dir.execute t (Dir.Lookup { dir; name }) with
  | Dir.Caps l -> Ok l
  | Dir.Error e -> Error e
  | x -> Alcotest.failf "lookup gave %s" (pp_resp x)

(* {1 Rights by columns} *)

type kind = Foreign_owner | Foreign of int | Own_dir of int

let kind_gen =
  QCheck.Gen.(
    oneof
      [
        return Foreign_owner;
        map (fun x -> Foreign x) (0 -- 255);
        map (fun x -> Own_dir x) (0 -- 255);
      ])

let case_gen =
  QCheck.Gen.(
    let* ncols = 1 -- 4 in
    let* rows =
      list_size (1 -- 6) (pair (list_repeat ncols (0 -- 255)) (list_size (1 -- 4) kind_gen))
    in
    let* dr = 0 -- 255 in
    return (ncols, rows, dr))

let print_case (n, rows, dr) =
  Printf.sprintf "cols %d dircap rights %#x rows [%s]" n dr
    (String.concat "; "
       (List.map
          (fun (ms, ks) ->
            Printf.sprintf "masks %s caps %s"
              (String.concat "," (List.map string_of_int ms))
              (String.concat ","
                 (List.map
                    (function
                      | Foreign_owner -> "fowner"
                      | Foreign x -> Printf.sprintf "f%#x" x
                      | Own_dir x -> Printf.sprintf "d%#x" x)
                    ks)))
          rows))

(* The mask the test expects, computed here from the row's masks: the
   union of the masks of the columns whose bit the capability has. *)
let expected_mask ncols masks dr =
  List.fold_left
    (fun (i, m) x -> (i + 1, if i < ncols && dr land (1 lsl i) <> 0 then m lor x else m))
    (0, 0) masks
  |> snd

let prop_columns (ncols, rows, dr) =
  let t = fresh () in
  let columns = List.init ncols (Printf.sprintf "c%d") in
  let dsecret = raw_secret () in
  let d =
    created
      (Dir.execute t (Dir.Create { via = Dir.root t; secret = dsecret; columns; link = None }))
  in
  let sub_secret = raw_secret () in
  let sub =
    created
      (Dir.execute t
         (Dir.Create { via = Dir.root t; secret = sub_secret; columns = [ "x" ]; link = None }))
  in
  let sub_s = Result.get_ok (Cap.Secret.of_raw sub_secret) in
  let stored =
    List.mapi
      (fun i (ms, ks) ->
        let caps =
          List.mapi
            (fun j k ->
              match k with
              | Foreign_owner -> (Cap.owner fport ~obj:(100 + j) fsecret, fsecret)
              | Foreign x -> (Cap.make fport ~obj:(100 + j) fsecret (r x), fsecret)
              | Own_dir x -> (Cap.make port ~obj:sub.obj sub_s (r x), sub_s))
            ks
        in
        (Printf.sprintf "n%d" i, ms, caps))
      rows
  in
  ignore
    (done_
       (install t d
          (List.map
             (fun (name, ms, caps) -> { Dir.name; masks = List.map r ms; caps = List.map fst caps })
             stored)));
  let dcap = Cap.make port ~obj:d.obj (Result.get_ok (Cap.Secret.of_raw dsecret)) (r dr) in
  List.for_all
    (fun (name, ms, caps) ->
      let mask = expected_mask ncols ms dr in
      match lookup t dcap name with
      | Error e -> QCheck.Test.fail_reportf "lookup %s: %a" name Dir.pp_error e
      | Ok entries ->
          List.length entries = List.length caps
          && List.for_all2
               (fun e ((c : Cap.t), secret) ->
                 match e with
                 | Dir.Narrowed (n : Cap.t) ->
                     let got = Rights.to_int n.rights in
                     if got land lnot mask <> 0 then
                       QCheck.Test.fail_reportf "%s: rights %#x beyond the mask %#x" name got mask;
                     if got land lnot (Rights.to_int c.rights) <> 0 then
                       QCheck.Test.fail_reportf "%s: rights %#x beyond the stored %a" name got
                         Rights.pp c.rights;
                     if got <> Rights.to_int c.rights land mask then
                       QCheck.Test.fail_reportf
                         "%s: rights %#x, not the stored ones within the mask" name got;
                     Port.equal n.port c.port && n.obj = c.obj
                     && Result.is_ok (Cap.validate secret ~need:n.rights n)
                 | Dir.Withheld p ->
                     (* only a foreign, not owner capability that does not fit *)
                     Port.equal p fport
                     && (not (Cap.is_owner c))
                     && Rights.to_int c.rights land lnot mask <> 0)
               entries caps)
    stored

let test_group_column () =
  let t = fresh () in
  let home = mkdir t (Dir.root t) ~link:("home", [ Rights.all; r 0x02; r 0x04 ]) in
  let file = Cap.owner fport ~obj:7 fsecret in
  ignore
    (done_
       (install t home [ row ~masks:[ Rights.all; Rights.read; Rights.none ] "notes" [ file ] ]));
  let group = Result.get_ok (Cap.restrict home (Dir.col 1)) in
  (match lookup t group "notes" with
  | Ok [ Dir.Narrowed c ] ->
      Alcotest.(check int) "read only" (Rights.to_int Rights.read) (Rights.to_int c.rights)
  | _ -> Alcotest.fail "group lookup");
  let other = Result.get_ok (Cap.restrict home (Dir.col 2)) in
  (match lookup t other "notes" with
  | Ok [ Dir.Narrowed c ] -> Alcotest.(check int) "nothing" 0 (Rights.to_int c.rights)
  | _ -> Alcotest.fail "other lookup");
  (* a path through the root's group column narrows [home] to its group column, then notes to read *)
  let root_group = Result.get_ok (Cap.restrict (Dir.root t) (Dir.col 1)) in
  let lk c n = lookup t c n in
  (match Path.resolve ~lookup:lk root_group "/home/notes" with
  | Ok c -> Alcotest.(check int) "path narrows" (Rights.to_int Rights.read) (Rights.to_int c.rights)
  | Error e -> Alcotest.failf "%a" (Path.pp_error Dir.pp_error) e);
  match Path.resolve ~lookup:lk (Dir.root t) "home/nothing/x" with
  | Error (`Lookup ("home/nothing", Dir.Not_found _)) -> ()
  | _ -> Alcotest.fail "a missing component is named"

(* The default masks, as src/capdir/README.md's table says, through paths from the root's three
   views: a directory made with them, a file linked in it, and a file server and a process server
   linked under /sys. *)
let test_default_masks () =
  let t = fresh () in
  let masks k = Dir.default_masks k in
  let sys = mkdir t (Dir.root t) ~link:("sys", masks Dir.Directory) in
  let home = mkdir t (Dir.root t) ~link:("home", masks Dir.Directory) in
  let file = Cap.owner fport ~obj:7 fsecret in
  let fs = Cap.owner fport ~obj:0 fsecret in
  Alcotest.(check bool)
    "kinds" true
    (Dir.kind_of ~port file = Dir.File
    && Dir.kind_of ~port fs = Dir.Server
    && Dir.kind_of ~port home = Dir.Directory);
  ignore (done_ (install t home [ row ~masks:(masks (Dir.kind_of ~port file)) "notes" [ file ] ]));
  ignore
    (done_
       (install t sys
          [
            row ~masks:(masks (Dir.kind_of ~port fs)) "fs" [ fs ];
            row ~masks:(masks Dir.Server) "proc1" [ Cap.owner fport ~obj:0 fsecret ];
          ]));
  let rights view path =
    match Path.resolve ~lookup:(lookup t) view path with
    | Ok c -> c.Cap.rights
    | Error e -> Alcotest.failf "%s: %a" path (Path.pp_error Dir.pp_error) e
  in
  let root = Dir.root t in
  let view i = Result.get_ok (Cap.restrict root (Dir.col i)) in
  let has what r = Rights.subset what r in
  List.iteri
    (fun i name ->
      let v = if i = 0 then root else view i in
      Alcotest.(check bool)
        (name ^ " reads a file put by path")
        true
        (has Rights.read (rights v "/home/notes"));
      List.iter
        (fun p ->
          Alcotest.(check bool)
            (name ^ " may create on " ^ p)
            (i = 0)
            (has Rights.create (rights v p)))
        [ "/sys/fs"; "/sys/proc1" ])
    [ "owner"; "group"; "other" ];
  Alcotest.(check bool)
    "the owner has everything on a file" true
    (Rights.equal Rights.all (rights root "/home/notes"));
  Alcotest.(check bool) "the group reads /sys/fs" true (has Rights.read (rights (view 1) "/sys/fs"));
  Alcotest.(check bool)
    "other has nothing on /sys/fs" true
    (Rights.equal Rights.none (rights (view 2) "/sys/fs"))

(* {1 Modify, delete, forgeries} *)

let test_rights () =
  let t = fresh () in
  let d = mkdir t (Dir.root t) ~link:("d", [ Rights.all ]) in
  let file = Cap.owner fport ~obj:7 fsecret in
  let read_only = Result.get_ok (Cap.restrict d Dir.columns_mask) in
  Alcotest.(check bool)
    "install needs modify" true
    (denied (install t read_only [ row "a" [ file ] ]));
  Alcotest.(check bool)
    "create needs modify" true
    (denied
       (Dir.execute t
          (Dir.Create { via = read_only; secret = raw_secret (); columns = [ "c" ]; link = None })));
  let s0 = done_ (install t d [ row "a" [ file ] ]) in
  let mod_only = Result.get_ok (Cap.restrict d (Rights.union Dir.modify Dir.columns_mask)) in
  Alcotest.(check bool)
    "delete needs delete" true
    (denied (Dir.execute t (Dir.Delete { dir = mod_only; name = "a" })));
  Alcotest.(check bool)
    "chmod with modify" true
    (done_ (Dir.execute t (Dir.Chmod { dir = mod_only; name = "a"; masks = [ Rights.read ] }))
    = s0 + 1);
  let del_only = Result.get_ok (Cap.restrict d Dir.delete) in
  Alcotest.(check bool)
    "chmod needs modify" true
    (denied (Dir.execute t (Dir.Chmod { dir = del_only; name = "a"; masks = [] })));
  Alcotest.(check bool) "list needs a column" true (denied (Dir.execute t (Dir.List del_only)));
  Alcotest.(check int)
    "delete with delete" (s0 + 2)
    (done_ (Dir.execute t (Dir.Delete { dir = del_only; name = "a" })));
  (* forged: a widened restricted capability, another port, a stale object *)
  let widened = Result.get_ok (Cap.v ~port ~obj:d.obj ~rights:Rights.all ~check:read_only.check) in
  Alcotest.(check bool)
    "widened" true
    (is_error (( = ) Dir.Capbad) (install t widened [ row "b" [ file ] ]));
  let foreign = Cap.owner fport ~obj:d.obj fsecret in
  Alcotest.(check bool)
    "other port" true
    (is_error (( = ) Dir.Capbad) (Dir.execute t (Dir.List foreign)));
  Alcotest.(check bool)
    "age needs the server's admin" true
    (is_error (( = ) Dir.Capbad) (Dir.execute t (Dir.Age d))
    && denied
         (Dir.execute t (Dir.Age (Result.get_ok (Cap.restrict (Dir.server_cap t) Rights.read)))));
  (* a forged capability of our own directory stored in a row is never made good by narrowing *)
  let forged =
    Result.get_ok (Cap.v ~port ~obj:d.obj ~rights:Rights.all ~check:(String.make 16 'x'))
  in
  ignore (done_ (install t d [ row ~masks:[ Rights.read ] "f" [ forged ] ]));
  match lookup t d "f" with
  | Ok [ Dir.Withheld _ ] -> ()
  | _ -> Alcotest.fail "a forged own capability is withheld"

(* {1 Atomic install and sequence numbers} *)

let listing t d =
  match Dir.execute t (Dir.List d) with
  | Dir.Listing { seq; rows; _ } -> (seq, rows)
  | x -> Alcotest.failf "list: %s" (pp_resp x)

let test_install () =
  let t = fresh () in
  let d = mkdir t (Dir.root t) in
  let f i = Cap.owner fport ~obj:i fsecret in
  Alcotest.(check int) "first" 1 (done_ (install t d [ row "a" [ f 1 ]; row "b" [ f 2 ] ]));
  let before = Dir.digest t in
  (* one bad row: nothing *)
  Alcotest.(check bool)
    "bad row" true
    (is_error
       (function Dir.Bad _ -> true | _ -> false)
       (install t d [ row "c" [ f 3 ]; row "x/y" [ f 4 ] ]));
  Alcotest.(check bool)
    "a row without capability" true
    (is_error
       (function Dir.Bad _ -> true | _ -> false)
       (install t d [ row "c" [ f 3 ]; row "e" [] ]));
  Alcotest.(check bool)
    "twice" true
    (is_error
       (function Dir.Bad _ -> true | _ -> false)
       (install t d [ row "c" [ f 3 ]; row "c" [ f 4 ] ]));
  Alcotest.(check bool)
    "stale expect" true
    (is_error (( = ) (Dir.Conflict 1)) (install ~expect:0 t d [ row "c" [ f 3 ] ]));
  Alcotest.(check string) "nothing changed" before (Dir.digest t);
  (* over the directory's row limit: nothing *)
  let small = Dir.create { lim with max_rows = 3 } in
  let sd = mkdir small (Dir.root small) in
  ignore (done_ (install small sd [ row "a" [ f 1 ]; row "b" [ f 2 ] ]));
  let b = Dir.digest small in
  Alcotest.(check bool)
    "limit" true
    (is_error
       (function Dir.Limit _ -> true | _ -> false)
       (install small sd [ row "b" [ f 5 ]; row "c" [ f 3 ]; row "d" [ f 4 ] ]));
  Alcotest.(check string) "nothing at the limit" b (Dir.digest small);
  Alcotest.(check int)
    "replace counts no new row" 2
    (done_ (install small sd [ row "b" [ f 5 ]; row "c" [ f 3 ] ]));
  Alcotest.(check int)
    "expect matches" 2
    (done_ (install ~expect:1 t d [ row "a" [ f 9 ]; row "c" [ f 3 ] ]));
  let seq, rows = listing t d in
  Alcotest.(check (list string)) "rows" [ "a"; "b"; "c" ] (List.map fst rows);
  Alcotest.(check int) "seq" 2 seq;
  (match lookup t d "a" with
  | Ok [ Dir.Narrowed c ] -> Alcotest.(check int) "replaced" 9 c.obj
  | _ -> Alcotest.fail "a");
  (* link in create is atomic with the name *)
  Alcotest.(check bool)
    "link on an existing name" true
    (is_error
       (function Dir.Exists _ -> true | _ -> false)
       (Dir.execute t
          (Dir.Create { via = d; secret = raw_secret (); columns = [ "x" ]; link = Some ("a", []) })));
  Alcotest.(check int) "no directory made" 2 (Dir.dirs t)

(* {1 Deduplication and the state codec} *)

let test_dedup_codec () =
  let t = fresh () in
  let d = mkdir t (Dir.root t) in
  let op =
    Dir.Install { dir = d; expect = None; rows = [ row "a" [ Cap.owner fport ~obj:1 fsecret ] ] }
  in
  let r1, ch1 = Dir.apply t ~client:5L ~req:1 op in
  let r2, ch2 = Dir.apply t ~client:5L ~req:1 op in
  Alcotest.(check bool) "retry: same answer, no change" true (r1 = r2 && ch1 && not ch2);
  Alcotest.(check int) "seq once" 1 (Option.get (Dir.seq t d.obj));
  let s = Consort.Codec.encode_string (Dir.codec lim) t in
  let t' = Result.get_ok (Consort.Codec.decode_string (Dir.codec lim) s) in
  Alcotest.(check string) "round trip" (Dir.digest t) (Dir.digest t');
  let _, ch3 = Dir.apply t' ~client:5L ~req:1 op in
  Alcotest.(check bool) "dedup survives the codec" false ch3

let fuzz =
  QCheck.Test.make ~count:3000 ~name:"decoders never raise"
    QCheck.(string_gen_of_size Gen.(0 -- 300) Gen.char)
    (fun s ->
      ignore (Consort.Codec.decode_string Dir.op_codec s);
      ignore (Consort.Codec.decode_string Dir.response_codec s);
      ignore (Consort.Codec.decode_string (Dir.codec lim) s);
      true)

(* {1 The server's requests} *)

let test_server_requests () =
  let module S = Consort_capdir.Dir_server in
  let got = ref None in
  S.reply_of_request
    (fun _ _ -> Alcotest.fail "garbage submitted")
    "\255garbage"
    (fun h d -> got := Some (h, d));
  (match !got with
  | Some (h, d) ->
      Alcotest.(check int) "STD_ARGBAD" (Status.to_int `Argbad) (Status.to_int h.Header.status);
      Alcotest.(check bool) "one line" false (String.contains d '\n')
  | None -> Alcotest.fail "no reply");
  let t = fresh () in
  let op = Dir.List (Dir.root t) in
  got := None;
  S.reply_of_request
    (fun (r : Dir.op Consort_kv.Wire.request_) k ->
      Alcotest.(check bool) "client and request number" true (r.client = 9L && r.req = 4);
      k (Consort_kv.Wire.Done (Dir.execute t r.op)))
    (Consort.Codec.encode_string S.request_codec (9L, 4, op))
    (fun h d -> got := Some (h, d));
  match !got with
  | Some (h, d) -> (
      Alcotest.(check int) "STD_OK" 0 (Status.to_int h.Header.status);
      match Consort.Codec.decode_string S.outcome_codec d with
      | Ok (Consort_kv.Wire.Done (Dir.Listing { seq = 0; _ })) -> ()
      | _ -> Alcotest.fail "the listing comes back")
  | None -> Alcotest.fail "no reply"

(* {1 Ageing} *)

let test_age () =
  let t = Dir.create { lim with lifetime = 3 } in
  let a = mkdir t (Dir.root t) ~link:("a", [ Rights.all ]) in
  let b = mkdir t (Dir.root t) in
  let srv = Dir.server_cap t in
  let age () =
    match Dir.execute t (Dir.Age srv) with
    | Dir.Aged l -> l
    | x -> Alcotest.failf "age: %s" (pp_resp x)
  in
  let touch c =
    ignore (done_ (Dir.execute t (Dir.Touch (Result.get_ok (Cap.restrict c Rights.none)))))
  in
  for _ = 1 to 10 do
    touch a;
    ignore (age ())
  done;
  Alcotest.(check bool) "touched lives" true (Dir.mem t a.obj);
  Alcotest.(check bool) "untouched gone" false (Dir.mem t b.obj);
  Alcotest.(check bool) "root never ages" true (Dir.mem t Dir.root_obj);
  (match Dir.execute t (Dir.Refs { server = srv; dir = Dir.root_obj }) with
  | Dir.Objects [ c ] -> Alcotest.(check bool) "refs unnarrowed" true (Cap.equal c a)
  | x -> Alcotest.failf "refs: %s" (pp_resp x));
  Alcotest.(check bool)
    "refs needs the server" true
    (is_error (( = ) Dir.Capbad) (Dir.execute t (Dir.Refs { server = a; dir = 1 })));
  match Dir.execute t (Dir.List b) with
  | Dir.Error (Dir.Not_found _) -> ()
  | _ -> Alcotest.fail "a collected directory is not found"

let () =
  Alcotest.run "capdir"
    [
      ( "rights",
        [
          qtest ~count:500 "a lookup through a column never yields more rights than the mask"
            (QCheck.make ~print:print_case case_gen)
            prop_columns;
          Alcotest.test_case "group column and paths" `Quick test_group_column;
          Alcotest.test_case "default masks, as documented" `Quick test_default_masks;
          Alcotest.test_case "modify, delete, forgeries" `Quick test_rights;
        ] );
      ("rows", [ Alcotest.test_case "atomic install, sequence numbers" `Quick test_install ]);
      ( "state",
        [
          Alcotest.test_case "deduplication, codec" `Quick test_dedup_codec;
          Alcotest.test_case "decoders never raise" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 3 |]) fuzz);
          Alcotest.test_case "ageing" `Quick test_age;
          Alcotest.test_case "server requests" `Quick test_server_requests;
        ] );
    ]
