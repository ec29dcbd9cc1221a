(* Local files and ports: rm_rf removes a tree and never follows a link out of it; scratch
   directories start empty and are gone after their function, even when it raises; files hold any
   bytes; a free port can be bound. *)
open Consort_local

let ( / ) = Filename.concat
let exists p = match Unix.lstat p with _ -> true | exception Unix.Unix_error _ -> false

let test_rm_rf () =
  let outside = temp_dir "local-outside" in
  Fun.protect ~finally:(fun () -> rm_rf outside) @@ fun () ->
  write_file (outside / "keep") "precious";
  let d = temp_dir "local-tree" in
  Unix.mkdir (d / "a") 0o700;
  Unix.mkdir (d / "a" / "b") 0o700;
  write_file (d / "a" / "b" / "f") "x";
  write_file (d / "g") "y";
  (* Links to a directory and to a file outside the tree: removed, not followed. *)
  Unix.symlink outside (d / "a" / "to-dir");
  Unix.symlink (outside / "keep") (d / "to-file");
  Unix.symlink (d / "nowhere") (d / "dangling");
  rm_rf d;
  Alcotest.(check bool) "the tree is gone" false (exists d);
  Alcotest.(check bool) "what a link pointed to is still there" true (exists (outside / "keep"));
  Alcotest.(check string) "and unchanged" "precious" (read_file (outside / "keep"));
  rm_rf d;
  rm_rf (d / "a" / "b");
  Alcotest.(check bool) "a missing path is no error" false (exists d)

exception Boom

let test_scratch () =
  let seen = ref "" in
  let r =
    with_scratch "local-test" ~seed:7 (fun d ->
        seen := d;
        Alcotest.(check (array string)) "empty" [||] (Sys.readdir d);
        write_file (d / "f") "z";
        42)
  in
  Alcotest.(check int) "its result" 42 r;
  Alcotest.(check bool) "removed after" false (exists !seen);
  (* Left over from a run that died: emptied first. *)
  Unix.mkdir !seen 0o755;
  write_file (!seen / "stale") "old";
  (match
     with_scratch "local-test" ~seed:7 (fun d ->
         Alcotest.(check string) "the same name for the same seed" !seen d;
         Alcotest.(check (array string)) "a stale one is emptied" [||] (Sys.readdir d);
         raise Boom)
   with
  | () -> Alcotest.fail "the exception was lost"
  | exception Boom -> ());
  Alcotest.(check bool) "removed after an exception" false (exists !seen)

let test_files () =
  let d = temp_dir "local-files" in
  Fun.protect ~finally:(fun () -> rm_rf d) @@ fun () ->
  let bytes = String.init 70_000 (fun i -> Char.chr (i * 7 land 255)) in
  write_file (d / "b") bytes;
  Alcotest.(check string) "any bytes, whole" bytes (read_file (d / "b"));
  write_file (d / "b") "";
  Alcotest.(check string) "replaced" "" (read_file (d / "b"));
  (match read_file (d / "missing") with
  | _ -> Alcotest.fail "read a missing file"
  | exception Sys_error _ -> ());
  Alcotest.(check bool) "contains" true (contains "hello world" "o w");
  Alcotest.(check bool) "contains the empty string" true (contains "" "");
  Alcotest.(check bool) "not longer than itself" false (contains "ab" "abc");
  Alcotest.(check bool) "at the end" true (contains "abc" "bc")

let test_free_port () =
  let p = free_port () in
  Alcotest.(check bool) "a port" true (p > 0 && p < 65536);
  let s = Unix.socket Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Fun.protect ~finally:(fun () -> Unix.close s) @@ fun () ->
  Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, p))

let () =
  Alcotest.run "local"
    [
      ( "local",
        [
          Alcotest.test_case "rm_rf" `Quick test_rm_rf;
          Alcotest.test_case "scratch directories" `Quick test_scratch;
          Alcotest.test_case "files" `Quick test_files;
          Alcotest.test_case "a free port" `Quick test_free_port;
        ] );
    ]
