(* The immutable file store: Bullet semantics, limits, aging, recovery from
   corruption, a full disk, and processes killed with SIGKILL mid-upload. *)

module Store = Consort_capfs.Store
module Io = Consort_util.Io
open Consort_local

let child_exe () = Filename.concat (Filename.dirname Sys.executable_name) "capfs_child.exe"

let with_dir f =
  let d = Filename.temp_file "capfs" "" in
  Sys.remove d;
  Fun.protect ~finally:(fun () -> rm_rf d) (fun () -> f d)

let clock_at now = fun () -> !now
let sec = Consort.Time.of_sec

let open_store ?config ?io ?(now = ref 0) dir =
  match Store.open_ ?config ?io ~clock:(clock_at now) dir with
  | Ok (t, found) -> (t, found)
  | Error `Locked -> Alcotest.fail "locked"
  | Error (`Io m) -> Alcotest.fail m

let error = Alcotest.testable Store.pp_error ( = )
let res a = Alcotest.result a error
let get = function Ok x -> x | Error e -> Alcotest.failf "%a" Store.pp_error e
let read_all t o = Store.read t o ~off:0 ~len:max_int
let ( / ) = Filename.concat
let findings = Alcotest.(list string)
let show found = List.map (Fmt.str "%a" Store.pp_finding) found
let damage found = List.filter Store.is_damage found

(* Semantics. *)

let test_create_read () =
  with_dir @@ fun d ->
  let t, found = open_store d in
  Alcotest.check findings "fresh store: nothing to report" [] (show found);
  let o = get (Store.create t ~commit:true ~safe:true "hello, world") in
  Alcotest.(check bool) "files are numbered from 1" true (o >= 1);
  Alcotest.check (res Alcotest.string) "read all" (Ok "hello, world") (read_all t o);
  Alcotest.check (res Alcotest.string) "read a range" (Ok "world") (Store.read t o ~off:7 ~len:5);
  Alcotest.check (res Alcotest.string) "a read past the end is cut" (Ok "ld")
    (Store.read t o ~off:10 ~len:100);
  Alcotest.check (res Alcotest.string) "at the end: nothing" (Ok "") (Store.read t o ~off:12 ~len:5);
  Alcotest.check (res Alcotest.string) "offset past the end" (Error `Bad_range)
    (Store.read t o ~off:13 ~len:1);
  Alcotest.check (res Alcotest.string) "negative offset" (Error `Bad_range)
    (Store.read t o ~off:(-1) ~len:1);
  Alcotest.check (res Alcotest.string) "negative length" (Error `Bad_range)
    (Store.read t o ~off:0 ~len:(-1));
  Alcotest.check (res Alcotest.int) "size" (Ok 12) (Store.size t o);
  Alcotest.check (res Alcotest.string) "no such file" (Error `Not_found) (read_all t (o + 100));
  let e = get (Store.create t ~commit:true ~safe:false "") in
  Alcotest.check (res Alcotest.int) "an empty file" (Ok 0) (Store.size t e);
  Alcotest.(check (list int)) "files" [ o; e ] (Store.files t);
  Store.close t

let test_uncommitted_unreadable () =
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let o = get (Store.create t ~commit:false ~safe:false "draft") in
  Alcotest.check (res Alcotest.string) "read" (Error `Not_committed) (read_all t o);
  Alcotest.check (res Alcotest.int) "size" (Error `Not_committed) (Store.size t o);
  Alcotest.(check (list int)) "not listed" [] (Store.files t);
  Alcotest.(check bool) "nothing on the disk" true (Sys.readdir (d / "meta") = [||]);
  let o' = get (Store.modify t o ~off:5 " two" ~commit:false ~safe:false) in
  Alcotest.(check int) "changed in place" o o';
  get (Store.commit t o ~safe:true);
  Alcotest.check (res Alcotest.string) "readable once committed" (Ok "draft two") (read_all t o);
  Alcotest.(check (option bool)) "committed" (Some true) (Store.committed t o);
  Store.close t

let test_committed_immutable () =
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let o = get (Store.create t ~commit:true ~safe:true "abcdef") in
  let m = get (Store.modify t o ~off:2 "XY" ~commit:false ~safe:false) in
  Alcotest.(check bool) "modify gives a new file" true (m <> o);
  Alcotest.(check (option bool)) "which is uncommitted" (Some false) (Store.committed t m);
  Alcotest.check (res Alcotest.string) "the original is unchanged" (Ok "abcdef") (read_all t o);
  get (Store.commit t m ~safe:true);
  Alcotest.check (res Alcotest.string) "modified" (Ok "abXYef") (read_all t m);
  let i = get (Store.insert t o ~off:3 "123" ~commit:true ~safe:true) in
  Alcotest.check (res Alcotest.string) "insert" (Ok "abc123def") (read_all t i);
  let x = get (Store.delete t o ~off:1 ~len:4 ~commit:true ~safe:false) in
  Alcotest.check (res Alcotest.string) "delete" (Ok "af") (read_all t x);
  let g = get (Store.modify t o ~off:6 "gh" ~commit:true ~safe:true) in
  Alcotest.check (res Alcotest.string) "append" (Ok "abcdefgh") (read_all t g);
  Alcotest.check (res Alcotest.int) "modify past the end" (Error `Bad_range)
    (Store.modify t o ~off:7 "z" ~commit:true ~safe:true);
  Alcotest.check (res Alcotest.int) "delete past the end" (Error `Bad_range)
    (Store.delete t o ~off:4 ~len:3 ~commit:true ~safe:true);
  Alcotest.check (res Alcotest.string) "the original is still unchanged" (Ok "abcdef")
    (read_all t o);
  Alcotest.(check int) "no uncommitted file left behind" 0 (Store.stats t).uncommitted_files;
  Store.close t

(* Random sequences of changes against a model: a string per file. *)
let prop_model =
  QCheck.Test.make ~count:100 ~name:"changes match a model of strings"
    QCheck.(
      list_of_size
        Gen.(int_range 1 25)
        (quad (int_bound 5) small_nat small_nat (string_of_size Gen.(int_bound 40))))
    (fun ops ->
      with_dir @@ fun d ->
      let t, _ = open_store d in
      let model = Hashtbl.create 16 in
      let o0 = get (Store.create t ~commit:true ~safe:false "seed") in
      Hashtbl.replace model o0 ("seed", true);
      let pick n =
        let ks = List.sort compare (Hashtbl.fold (fun k _ acc -> k :: acc) model []) in
        List.nth ks (n mod List.length ks)
      in
      List.iter
        (fun (op, a, b, s) ->
          let o = pick a in
          let content, committed = Hashtbl.find model o in
          let len = String.length content in
          let commit = b mod 2 = 0 in
          let off = if len = 0 then 0 else b mod (len + 1) in
          let expect f =
            let c = f content in
            fun r ->
              let o' = get r in
              if committed then assert (o' <> o && not (Hashtbl.mem model o')) else assert (o' = o);
              Hashtbl.replace model o' (c, commit)
          in
          match op with
          | 0 ->
              let o' = get (Store.create t ~commit ~safe:false s) in
              Hashtbl.replace model o' (s, commit)
          | 1 ->
              expect
                (fun c ->
                  let e = off + String.length s in
                  String.sub c 0 off ^ s ^ if e < len then String.sub c e (len - e) else "")
                (Store.modify t o ~off s ~commit ~safe:false)
          | 2 ->
              expect
                (fun c -> String.sub c 0 off ^ s ^ String.sub c off (len - off))
                (Store.insert t o ~off s ~commit ~safe:false)
          | 3 ->
              let n = min (String.length s) (len - off) in
              expect
                (fun c -> String.sub c 0 off ^ String.sub c (off + n) (len - off - n))
                (Store.delete t o ~off ~len:n ~commit ~safe:false)
          | 4 ->
              get (Store.commit t o ~safe:false);
              Hashtbl.replace model o (content, true)
          | _ ->
              if Hashtbl.length model > 1 then (
                get (Store.destroy t o);
                Hashtbl.remove model o))
        ops;
      let check t ~reopened =
        Hashtbl.iter
          (fun o (c, committed) ->
            match (committed, read_all t o) with
            | true, Ok c' -> assert (c = c')
            | false, Error `Not_committed -> assert (not reopened)
            | false, Error `Not_found -> assert reopened
            | _ -> assert false)
          model
      in
      check t ~reopened:false;
      Store.close t;
      let t, found = open_store d in
      assert (found = []);
      check t ~reopened:true;
      let committed = Hashtbl.fold (fun o (_, c) acc -> if c then o :: acc else acc) model [] in
      assert (List.sort compare committed = Store.files t);
      Store.close t;
      true)

let test_dedup () =
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let data = String.make 100_000 'q' in
  let a = get (Store.create t ~commit:true ~safe:true data) in
  let b = get (Store.create t ~commit:true ~safe:true data) in
  let c = get (Store.insert t a ~off:0 "" ~commit:true ~safe:true) in
  Alcotest.(check bool) "three files" true (a <> b && b <> c && a <> c);
  let s = Store.stats t in
  Alcotest.(check int) "one blob" 1 s.blobs;
  Alcotest.(check int) "stored once" 100_000 s.blob_bytes;
  Alcotest.(check int) "one blob on the disk" 1 (Array.length (Sys.readdir (d / "blobs")));
  get (Store.destroy t a);
  get (Store.destroy t c);
  Alcotest.check (res Alcotest.int) "the last sharer still reads" (Ok 100_000) (Store.size t b);
  Alcotest.check (res Alcotest.string) "destroyed" (Error `Not_found) (read_all t a);
  get (Store.destroy t b);
  Alcotest.(check int)
    "the blob goes with the last file" 0
    (Array.length (Sys.readdir (d / "blobs")));
  Alcotest.(check int) "no records" 0 (Array.length (Sys.readdir (d / "meta")));
  Store.close t

let test_aging () =
  with_dir @@ fun d ->
  let now = ref 0 in
  let config = { Store.default_config with idle_timeout = sec 60. } in
  let t, _ = open_store ~config ~now d in
  let u = get (Store.create t ~commit:false ~safe:false "u") in
  let v = get (Store.create t ~commit:false ~safe:false "v") in
  let c = get (Store.create t ~commit:true ~safe:false "c") in
  now := sec 50.;
  Alcotest.(check (list int)) "not idle long enough" [] (Store.age t);
  get (Store.touch t u);
  ignore (get (Store.modify t v ~off:1 "w" ~commit:false ~safe:false));
  now := sec 100.;
  Alcotest.(check (list int)) "used at 50 s: still there at 100 s" [] (Store.age t);
  now := sec 111.;
  Alcotest.(check (list int)) "idle 61 s: destroyed" [ u; v ] (Store.age t);
  Alcotest.(check bool) "gone" false (Store.mem t u);
  now := sec 1e6;
  ignore (Store.age t);
  Alcotest.check (res Alcotest.string) "committed files never age" (Ok "c") (read_all t c);
  Alcotest.(check int) "accounting" 0 (Store.stats t).uncommitted_bytes;
  Store.close t

let test_limits () =
  with_dir @@ fun d ->
  let config =
    {
      Store.default_config with
      max_uncommitted_files = 3;
      max_uncommitted_bytes = 1000;
      max_file_size = 600;
    }
  in
  let t, _ = open_store ~config d in
  let a = get (Store.create t ~commit:false ~safe:false (String.make 400 'a')) in
  let _ = get (Store.create t ~commit:false ~safe:false (String.make 400 'b')) in
  Alcotest.check (res Alcotest.int) "bytes" (Error `Too_large)
    (Store.create t ~commit:false ~safe:false (String.make 300 'c'));
  Alcotest.check (res Alcotest.int) "file size" (Error `Too_large)
    (Store.create t ~commit:true ~safe:false (String.make 601 'c'));
  Alcotest.check (res Alcotest.int) "growing past the byte limit" (Error `Too_large)
    (Store.insert t a ~off:0 (String.make 201 'x') ~commit:false ~safe:false);
  Alcotest.check (res Alcotest.string) "a refused change changes nothing"
    (Ok (String.make 400 'a'))
    (get (Store.commit t a ~safe:false);
     read_all t a);
  let _ = get (Store.create t ~commit:false ~safe:false "c") in
  let _ = get (Store.create t ~commit:false ~safe:false "d") in
  Alcotest.check (res Alcotest.int) "count" (Error `Too_many_uncommitted)
    (Store.create t ~commit:false ~safe:false "e");
  Alcotest.check (res Alcotest.int) "a copy of a committed file counts too"
    (Error `Too_many_uncommitted)
    (Store.modify t a ~off:0 "z" ~commit:false ~safe:false);
  let s = Store.stats t in
  Alcotest.(check int) "uncommitted files" 3 s.uncommitted_files;
  Alcotest.(check int) "uncommitted bytes" 402 s.uncommitted_bytes;
  Store.close t

let test_reopen () =
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let a = get (Store.create t ~commit:true ~safe:true "kept") in
  let u = get (Store.create t ~commit:false ~safe:false "lost") in
  let sa = Option.get (Store.secret t a) and s0 = Option.get (Store.secret t 0) in
  Alcotest.(check int) "secrets are 32 bytes" 32 (String.length sa);
  Alcotest.(check bool) "distinct secrets" true (sa <> s0 && Some sa <> Store.secret t u);
  Store.close t;
  let t, found = open_store d in
  Alcotest.check findings "clean" [] (show found);
  Alcotest.check (res Alcotest.string) "committed file kept" (Ok "kept") (read_all t a);
  Alcotest.(check bool) "uncommitted file gone" false (Store.mem t u);
  Alcotest.(check (option string)) "file secret kept" (Some sa) (Store.secret t a);
  Alcotest.(check (option string)) "server secret kept" (Some s0) (Store.secret t 0);
  let n = get (Store.create t ~commit:true ~safe:true "new") in
  Alcotest.(check bool) "numbers not reused" true (n > a && n > u);
  get (Store.destroy t n);
  Store.close t;
  let t, _ = open_store d in
  let n' = get (Store.create t ~commit:true ~safe:true "newer") in
  Alcotest.(check bool) "not even the number of a destroyed file" true (n' > n);
  let sa' = get (Store.revoke t a) in
  let s0' = get (Store.revoke t 0) in
  Alcotest.(check bool) "revoke changes the secrets" true (sa' <> sa && s0' <> s0);
  Store.close t;
  let t, found = open_store d in
  Alcotest.check findings "clean" [] (show found);
  Alcotest.(check (option string)) "new file secret kept" (Some sa') (Store.secret t a);
  Alcotest.(check (option string)) "new server secret kept" (Some s0') (Store.secret t 0);
  Alcotest.check (res Alcotest.string) "content kept" (Ok "kept") (read_all t a);
  Store.close t

let test_lock () =
  with_dir @@ fun d ->
  let run () =
    let r, w = Unix.pipe ~cloexec:true () in
    let pid =
      Unix.create_process (child_exe ()) [| "capfs_child"; "lock"; d |] Unix.stdin w Unix.stderr
    in
    Unix.close w;
    let ic = Unix.in_channel_of_descr r in
    let line = try input_line ic with End_of_file -> "" in
    close_in ic;
    ignore (Unix.waitpid [] pid);
    line
  in
  let t, _ = open_store d in
  Alcotest.(check string) "a second process is refused" "locked" (run ());
  Store.close t;
  Alcotest.(check string) "and admitted once the store is closed" "opened" (run ())

(* The order of the disk steps: the bytes reach the disk under a temporary
   name, then the name, first for the blob, then for the record. *)
let test_step_order () =
  with_dir @@ fun d ->
  let steps = ref [] and on = ref true in
  let io = Io.hooked (fun s -> if !on then steps := s :: !steps) Io.real in
  let t, _ = open_store ~io d in
  let shape () =
    let r =
      List.rev_map
        (function
          | Io.Write p -> "write " ^ Filename.basename (Filename.dirname p)
          | Io.Fsync p -> "fsync " ^ Filename.basename (Filename.dirname p)
          | Io.Fsync_dir p -> "fsync-dir " ^ Filename.basename p
          | Io.Rename (a, b) ->
              Printf.sprintf "rename %s -> %s"
                (Filename.basename (Filename.dirname a))
                (Filename.basename (Filename.dirname b))
          | Io.Unlink p -> "unlink " ^ Filename.basename (Filename.dirname p))
        !steps
    in
    steps := [];
    r
  in
  steps := [];
  let first = get (Store.create t ~commit:false ~safe:false "") in
  Alcotest.(check (list string))
    "the first file number reserves a block of them"
    [
      "write tmp";
      "fsync tmp";
      "rename tmp -> " ^ Filename.basename d;
      "fsync-dir " ^ Filename.basename d;
    ]
    (shape ());
  ignore first;
  on := true;
  let a = get (Store.create t ~commit:true ~safe:true (String.make 100_000 'x')) in
  Alcotest.(check (list string))
    "a safe commit"
    [
      "write tmp";
      "write tmp";
      "fsync tmp";
      "rename tmp -> blobs";
      "fsync-dir blobs";
      "write tmp";
      "fsync tmp";
      "rename tmp -> meta";
      "fsync-dir meta";
    ]
    (shape ());
  let b = get (Store.create t ~commit:true ~safe:false "y") in
  Alcotest.(check (list string))
    "an unsafe commit"
    [ "write tmp"; "rename tmp -> blobs"; "write tmp"; "rename tmp -> meta" ]
    (shape ());
  get (Store.commit t b ~safe:true);
  Alcotest.(check (list string))
    "made safe later"
    [ "fsync blobs"; "fsync-dir blobs"; "fsync meta"; "fsync-dir meta" ]
    (shape ());
  let _ = get (Store.create t ~commit:true ~safe:true (String.make 100_000 'x')) in
  Alcotest.(check (list string))
    "a shared blob: only the record"
    [ "write tmp"; "fsync tmp"; "rename tmp -> meta"; "fsync-dir meta" ]
    (shape ());
  get (Store.destroy t a);
  Alcotest.(check (list string))
    "destroy: the record first"
    [ "unlink meta"; "fsync-dir meta" ]
    (shape ());
  Store.close t

(* Damage found at recovery. *)

let flip path off =
  let fd = Unix.openfile path [ Unix.O_RDWR ] 0 in
  let b = Bytes.create 1 in
  ignore (Unix.lseek fd off Unix.SEEK_SET);
  ignore (Unix.read fd b 0 1);
  Bytes.set b 0 (Char.chr (Char.code (Bytes.get b 0) lxor 0x20));
  ignore (Unix.lseek fd off Unix.SEEK_SET);
  ignore (Unix.write fd b 0 1);
  Unix.close fd

let blob_of t o = Sha256.to_hex (Sha256.string (get (read_all t o)))

let three_files d =
  let t, _ = open_store d in
  let a = get (Store.create t ~commit:true ~safe:true (String.make 5000 'a')) in
  let b = get (Store.create t ~commit:true ~safe:true (String.make 7000 'b')) in
  let c = get (Store.create t ~commit:true ~safe:true (String.make 7000 'b')) in
  let ha = blob_of t a and hb = blob_of t b in
  Store.close t;
  (a, b, c, ha, hb)

let test_flipped_blob () =
  with_dir @@ fun d ->
  let a, b, c, ha, _ = three_files d in
  flip (d / "blobs" / ha) 4321;
  let t, found = open_store d in
  Alcotest.check findings "reported, one line each"
    [
      Printf.sprintf "corrupt blob blobs/%s: content hash differs (5000 bytes) (set aside)" ha;
      Printf.sprintf "file %d lost: blob missing or corrupt (record set aside)" a;
    ]
    (show found);
  Alcotest.check (res Alcotest.string) "never served" (Error `Not_found) (read_all t a);
  Alcotest.check (res Alcotest.int) "the others are" (Ok 7000) (Store.size t b);
  Alcotest.check (res Alcotest.int) "the others are" (Ok 7000) (Store.size t c);
  Alcotest.(check int) "kept aside" 2 (Array.length (Sys.readdir (d / "corrupt")));
  Store.close t;
  let t, found = open_store d in
  Alcotest.check findings "reported once" [] (show found);
  Store.close t

let test_truncated_blob () =
  with_dir @@ fun d ->
  let _, b, c, _, hb = three_files d in
  Unix.truncate (d / "blobs" / hb) 4096;
  let t, found = open_store d in
  Alcotest.(check int) "the blob and both files sharing it" 3 (List.length (damage found));
  Alcotest.check (res Alcotest.string) "never served" (Error `Not_found) (read_all t b);
  Alcotest.check (res Alcotest.string) "never served" (Error `Not_found) (read_all t c);
  Store.close t

let test_flipped_record () =
  with_dir @@ fun d ->
  let a, b, _, ha, _ = three_files d in
  flip (d / "meta" / string_of_int b) 30;
  let t, found = open_store d in
  Alcotest.check findings "reported"
    [ Printf.sprintf "corrupt record meta/%d: checksum mismatch (set aside)" b ]
    (show found);
  Alcotest.check (res Alcotest.string) "never served" (Error `Not_found) (read_all t b);
  Alcotest.check (res Alcotest.int) "the others are" (Ok 5000) (Store.size t a);
  Alcotest.(check bool) "blob kept" true (Sys.file_exists (d / "blobs" / ha));
  Store.close t;
  (* A record whose only file is damaged: its blob is set aside, not deleted. *)
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let o = get (Store.create t ~commit:true ~safe:true "precious") in
  let h = blob_of t o in
  Store.close t;
  Unix.truncate (d / "meta" / string_of_int o) 50;
  let t, found = open_store d in
  Alcotest.(check int) "record and blob reported" 2 (List.length (damage found));
  Alcotest.(check bool)
    "the bytes are kept in corrupt/" true
    (Sys.file_exists (d / "corrupt" / ("blobs-" ^ h)));
  Alcotest.(check (list int)) "nothing served" [] (Store.files t);
  Store.close t

let test_temp_and_strays () =
  with_dir @@ fun d ->
  let a, _, _, _, _ = three_files d in
  let write p s =
    let oc = open_out_bin p in
    output_string oc s;
    close_out oc
  in
  write (d / "tmp" / "blob.1.1") "half a fi";
  write (d / "blobs" / String.make 64 'e') "orphan";
  write (d / "blobs" / "junk") "?";
  write (d / "meta" / "notanumber") "?";
  let t, found = open_store d in
  Alcotest.check findings "reported"
    [
      "removed interrupted write tmp/blob.1.1";
      "unknown file meta/notanumber (set aside)";
      Printf.sprintf "removed unreferenced blob blobs/%s" (String.make 64 'e');
      "unknown file blobs/junk (set aside)";
    ]
    (show found);
  Alcotest.(check int) "tmp emptied" 0 (Array.length (Sys.readdir (d / "tmp")));
  Alcotest.check (res Alcotest.int) "files served" (Ok 5000) (Store.size t a);
  Store.close t

let test_server_record () =
  with_dir @@ fun d ->
  let t, _ = open_store d in
  let s0 = Store.secret t 0 in
  Store.close t;
  flip (d / "server") 40;
  let t, found = open_store d in
  Alcotest.check findings "reported"
    [ "server record bad: checksum mismatch; new server secret made" ]
    (show found);
  Alcotest.(check bool) "new secret" true (Store.secret t 0 <> s0);
  Store.close t

(* A full disk, made by the I/O layer. *)

let test_no_space_injected () =
  with_dir @@ fun d ->
  let full = ref false in
  let io =
    Io.hooked
      (function
        | Io.Write _ when !full -> raise (Unix.Unix_error (Unix.ENOSPC, "write", "")) | _ -> ())
      Io.real
  in
  let t, _ = open_store ~io d in
  let a = get (Store.create t ~commit:true ~safe:true "before") in
  full := true;
  Alcotest.check (res Alcotest.int) "create refused" (Error `No_space)
    (Store.create t ~commit:true ~safe:true "during");
  Alcotest.(check int)
    "no file left" 1
    (List.length (Store.files t) + (Store.stats t).uncommitted_files);
  let u = get (Store.create t ~commit:false ~safe:false "draft") in
  Alcotest.check (res Alcotest.int) "a change that commits" (Error `No_space)
    (Store.modify t u ~off:5 "!" ~commit:true ~safe:true);
  Alcotest.(check (option bool)) "leaves the file uncommitted" (Some false) (Store.committed t u);
  Alcotest.check (res Alcotest.int) "a copy that commits" (Error `No_space)
    (Store.modify t a ~off:0 "B" ~commit:true ~safe:true);
  Alcotest.(check int) "leaves no copy" 1 (Store.stats t).uncommitted_files;
  Alcotest.(check int) "tmp is clean" 0 (Array.length (Sys.readdir (d / "tmp")));
  Alcotest.check (res Alcotest.string) "what was committed is intact" (Ok "before") (read_all t a);
  full := false;
  get (Store.commit t u ~safe:true);
  Alcotest.check (res Alcotest.string) "committed once there is room" (Ok "draft!") (read_all t u);
  Store.close t;
  let t, found = open_store d in
  Alcotest.check findings "clean" [] (show found);
  Alcotest.(check int) "both files" 2 (List.length (Store.files t));
  Store.close t

(* A failed fsync is fatal: the write is refused, the error kept for the
   server to stop on, and no later write is accepted (after a failed fsync
   the page cache's state is unknown: retrying and carrying on could
   acknowledge what the kernel dropped). A restart finds what was
   acknowledged before. *)
let test_fsync_failure_fatal () =
  with_dir @@ fun d ->
  let failing = ref false in
  let io =
    Io.hooked
      (function
        | Io.Fsync _ when !failing -> raise (Unix.Unix_error (Unix.EIO, "fsync", "")) | _ -> ())
      Io.real
  in
  let t, _ = open_store ~io d in
  let a = get (Store.create t ~commit:true ~safe:true "before") in
  Alcotest.(check (option string)) "no error yet" None (Store.disk_error t);
  failing := true;
  (match Store.create t ~commit:true ~safe:true "during" with
  | Error (`Io _) -> ()
  | Ok _ -> Alcotest.fail "a write whose fsync failed was acknowledged"
  | Error e -> Alcotest.failf "refused as %a" Store.pp_error e);
  Alcotest.(check bool) "the error is kept" true (Store.disk_error t <> None);
  failing := false;
  (match Store.create t ~commit:true ~safe:true "after" with
  | Error (`Io _) -> ()
  | Ok _ -> Alcotest.fail "a write after a failed fsync was acknowledged"
  | Error e -> Alcotest.failf "refused as %a" Store.pp_error e);
  (match Store.create t ~commit:true ~safe:false "unsafe" with
  | Error (`Io _) -> ()
  | _ -> Alcotest.fail "an unsafe write after a failed fsync was not refused");
  Alcotest.check (res Alcotest.string) "reads go on" (Ok "before") (read_all t a);
  Store.close t;
  let t, _ = open_store d in
  Alcotest.(check int) "one file after a restart" 1 (List.length (Store.files t));
  Alcotest.check (res Alcotest.string) "what was acknowledged is there" (Ok "before") (read_all t a);
  Alcotest.(check (option string)) "a fresh start" None (Store.disk_error t);
  Store.close t

(* A real full disk: a 1 MiB tmpfs in a private mount namespace. *)
let test_no_space_tmpfs () =
  with_dir @@ fun d ->
  Unix.mkdir d 0o755;
  let script =
    Printf.sprintf "mount -t tmpfs -o size=1m consort-capfs %s && exec %s fill %s/store"
      (Filename.quote d)
      (Filename.quote (child_exe ()))
      (Filename.quote d)
  in
  let r, w = Unix.pipe ~cloexec:true () in
  let pid =
    Unix.create_process "unshare"
      [| "unshare"; "-m"; "--propagation"; "private"; "sh"; "-c"; script |]
      Unix.stdin w Unix.stderr
  in
  Unix.close w;
  let ic = Unix.in_channel_of_descr r in
  let lines = ref [] in
  (try
     while true do
       lines := input_line ic :: !lines
     done
   with End_of_file -> ());
  let lines = List.rev !lines in
  close_in ic;
  let _, st = Unix.waitpid [] pid in
  Alcotest.(check bool) "the child checked its files and exited 0" true (st = Unix.WEXITED 0);
  let acks = List.filter (fun l -> String.length l > 4 && String.sub l 0 4 = "ack ") lines in
  Alcotest.(check bool) "some files fit" true (List.length acks >= 3);
  Alcotest.(check bool) "the disk filled" true (List.mem "full" lines);
  Alcotest.(check bool)
    "recommitted after room was made" true
    (List.exists (fun l -> String.length l > 12 && String.sub l 0 12 = "recommitted ") lines)

(* Processes killed with SIGKILL during uploads. *)

let run_child args =
  let r, w = Unix.pipe ~cloexec:true () in
  let pid =
    Unix.create_process (child_exe ())
      (Array.of_list ("capfs_child" :: args))
      Unix.stdin w Unix.stderr
  in
  Unix.close w;
  (pid, Unix.in_channel_of_descr r)

(* Reads the child's complete lines; with [kill_after], sends SIGKILL once that
   many acknowledgements have come. *)
let read_acks ?kill_after (pid, ic) =
  let acks = ref 0 and lines = ref [] in
  (try
     while true do
       let l = input_line ic in
       lines := l :: !lines;
       if String.length l > 4 && String.sub l 0 4 = "ack " then (
         incr acks;
         if Some !acks = kill_after then Unix.kill pid Sys.sigkill)
     done
   with End_of_file -> ());
  close_in ic;
  let _, st = Unix.waitpid [] pid in
  (List.rev !lines, st)

let crash_rounds = 24
let external_rounds = 4

let test_crash () =
  with_dir @@ fun d ->
  let must = Hashtbl.create 64 in
  let killed = ref 0 in
  let check_store round =
    let t, found = open_store d in
    (match damage found with
    | [] -> ()
    | f :: _ -> Alcotest.failf "round %d: damage after a process crash: %a" round Store.pp_finding f);
    Hashtbl.iter
      (fun o h ->
        match read_all t o with
        | Ok s when Sha256.to_hex (Sha256.string s) = h -> ()
        | Ok _ -> Alcotest.failf "round %d: acknowledged file %d has other bytes" round o
        | Error e -> Alcotest.failf "round %d: acknowledged file %d: %a" round o Store.pp_error e)
      must;
    List.iter
      (fun o ->
        match read_all t o with
        | Ok s ->
            if not (Capfs_gen_t.check s) then
              Alcotest.failf "round %d: file %d is not a whole upload" round o
        | Error e -> Alcotest.failf "round %d: listed file %d: %a" round o Store.pp_error e)
      (Store.files t);
    Alcotest.(check int) "tmp is clean after recovery" 0 (Array.length (Sys.readdir (d / "tmp")));
    Store.close t
  in
  for round = 0 to crash_rounds + external_rounds - 1 do
    let seed = 1000 + round in
    let kill_at, kill_after =
      if round < crash_rounds then (1 + (round * 53 mod 190), None)
      else (0, Some (3 + ((round - crash_rounds) * 5)))
    in
    let child = run_child [ "upload"; d; string_of_int seed; "24"; string_of_int kill_at ] in
    let lines, st = read_acks ?kill_after child in
    (match st with
    | Unix.WSIGNALED s when s = Sys.sigkill -> incr killed
    | Unix.WEXITED 0 ->
        Alcotest.(check bool)
          "a child that was not killed finished" true
          (List.exists (fun l -> String.length l > 5 && String.sub l 0 5 = "done ") lines)
    | _ -> Alcotest.failf "round %d: child failed" round);
    List.iter
      (fun l ->
        match String.split_on_char ' ' l with
        | [ "ack"; o; h ] -> Hashtbl.replace must (int_of_string o) h
        | [ "destroying"; o ] -> Hashtbl.remove must (int_of_string o)
        | _ -> ())
      lines;
    check_store round
  done;
  Alcotest.(check bool) "most rounds were killed mid-upload" true (!killed >= crash_rounds);
  Alcotest.(check bool) "files accumulated" true (Hashtbl.length must >= 20)

let () =
  Alcotest.run "capfs"
    [
      ( "semantics",
        [
          Alcotest.test_case "create and read" `Quick test_create_read;
          Alcotest.test_case "uncommitted files are unreadable" `Quick test_uncommitted_unreadable;
          Alcotest.test_case "committed files never change" `Quick test_committed_immutable;
          Alcotest.test_case "changes match a model" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 9 |]) prop_model);
          Alcotest.test_case "identical content stored once" `Quick test_dedup;
          Alcotest.test_case "idle uncommitted files age away" `Quick test_aging;
          Alcotest.test_case "limits on uncommitted files" `Quick test_limits;
          Alcotest.test_case "reopen and revoke" `Quick test_reopen;
          Alcotest.test_case "one process per store" `Quick test_lock;
          Alcotest.test_case "fsync before rename, blob before record" `Quick test_step_order;
        ] );
      ( "recovery",
        [
          Alcotest.test_case "a flipped byte in a blob" `Quick test_flipped_blob;
          Alcotest.test_case "a truncated shared blob" `Quick test_truncated_blob;
          Alcotest.test_case "a flipped or torn record" `Quick test_flipped_record;
          Alcotest.test_case "temp files and strays" `Quick test_temp_and_strays;
          Alcotest.test_case "a corrupt server record" `Quick test_server_record;
        ] );
      ( "full disk",
        [
          Alcotest.test_case "ENOSPC from the I/O layer" `Quick test_no_space_injected;
          Alcotest.test_case "a failed fsync is fatal" `Quick test_fsync_failure_fatal;
          Alcotest.test_case "ENOSPC on a 1 MiB tmpfs" `Quick test_no_space_tmpfs;
        ] );
      ("crash", [ Alcotest.test_case "SIGKILL during uploads" `Slow test_crash ]);
    ]
