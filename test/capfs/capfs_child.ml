(* A process that uses a store, for the tests that need a real process:

   capfs_child upload DIR SEED NFILES KILL_AT
     uploads NFILES generated files in several ways and prints, flushed,
     "ack OBJ HEX" once a file is committed with the safety flag and
     "destroying OBJ" before it destroys one. If KILL_AT > 0, it kills itself
     with SIGKILL just before its KILL_AT-th disk step.
   capfs_child fill DIR
     creates safe committed files until the disk is full, prints "ack OBJ HEX"
     for each, then "full" when the store says No_space, then checks that the
     store still serves every file and that its tmp/ is empty.
   capfs_child lock DIR
     prints "locked" if the store is open elsewhere, "opened" otherwise. *)

module Store = Consort_capfs.Store

let clock () = int_of_float (Unix.gettimeofday () *. 1e9)
let hex s = Sha256.to_hex (Sha256.string s)

let say fmt =
  Printf.ksprintf
    (fun s ->
      print_string s;
      flush stdout)
    fmt

let fail fmt =
  Printf.ksprintf
    (fun s ->
      prerr_endline s;
      exit 1)
    fmt

let ok what = function Ok x -> x | Error e -> fail "%s: %s" what (Fmt.str "%a" Store.pp_error e)

let upload dir seed nfiles kill_at =
  let steps = ref 0 in
  let io =
    Consort_util.Io.hooked
      (fun _ ->
        incr steps;
        if kill_at > 0 && !steps >= kill_at then Unix.kill (Unix.getpid ()) Sys.sigkill)
      Consort_util.Io.real
  in
  let t, _ =
    match Store.open_ ~io ~clock dir with
    | Ok x -> x
    | Error `Locked -> fail "locked"
    | Error (`Io m) -> fail "open: %s" m
  in
  let acked = ref [] in
  for i = 0 to nfiles - 1 do
    let data = Capfs_gen.content ~seed ~i in
    let n = String.length data in
    let obj =
      match i mod 4 with
      | 0 -> ok "create" (Store.create t ~commit:true ~safe:true data)
      | 1 ->
          (* In pieces: a first part, then appends, the last one committing. *)
          let first = n / 3 in
          let o =
            ok "create" (Store.create t ~commit:false ~safe:false (String.sub data 0 first))
          in
          let rec go off =
            let len = min 50_000 (n - off) in
            let last = off + len >= n in
            let o' =
              ok "modify" (Store.modify t o ~off (String.sub data off len) ~commit:last ~safe:true)
            in
            if o' <> o then fail "modify of an uncommitted file gave a new file";
            if not last then go (off + len)
          in
          go first;
          o
      | 2 ->
          (* The middle inserted last. *)
          let a = n / 4 and b = n / 2 in
          let o =
            ok "create"
              (Store.create t ~commit:false ~safe:false
                 (String.sub data 0 a ^ String.sub data b (n - b)))
          in
          ignore
            (ok "insert"
               (Store.insert t o ~off:a (String.sub data a (b - a)) ~commit:true ~safe:true));
          o
      | _ ->
          let o = ok "create" (Store.create t ~commit:true ~safe:false data) in
          ok "commit" (Store.commit t o ~safe:true);
          o
    in
    say "ack %d %s\n" obj (hex data);
    acked := obj :: !acked;
    if i mod 5 = 4 then (
      let victim = List.nth !acked (List.length !acked / 2) in
      acked := List.filter (( <> ) victim) !acked;
      say "destroying %d\n" victim;
      ok "destroy" (Store.destroy t victim))
  done;
  say "done %d steps\n" !steps;
  Store.close t

let fill dir =
  let t, _ =
    match Store.open_ ~clock dir with
    | Ok x -> x
    | Error `Locked -> fail "locked"
    | Error (`Io m) -> fail "open: %s" m
  in
  let rec go i acc =
    if i > 10_000 then fail "the disk never filled"
    else
      let data = Printf.sprintf "%08d" i ^ String.make 99_992 (Char.chr (i land 255)) in
      match Store.create t ~commit:true ~safe:true data with
      | Ok o ->
          say "ack %d %s\n" o (hex data);
          go (i + 1) ((o, data) :: acc)
      | Error `No_space -> acc
      | Error e -> fail "create: %s" (Fmt.str "%a" Store.pp_error e)
  in
  let files = go 0 [] in
  say "full\n";
  List.iter
    (fun (o, data) ->
      match Store.read t o ~off:0 ~len:max_int with
      | Ok d when d = data -> ()
      | Ok _ -> fail "file %d differs after the disk filled" o
      | Error e -> fail "file %d: %s" o (Fmt.str "%a" Store.pp_error e))
    files;
  if Sys.readdir (Filename.concat dir "tmp") <> [||] then fail "tmp/ not empty after No_space";
  (* An uncommitted file can wait for room and be committed later. *)
  let o =
    ok "create uncommitted" (Store.create t ~commit:false ~safe:false (String.make 250_000 'x'))
  in
  (match Store.commit t o ~safe:true with
  | Error `No_space -> ()
  | Ok () -> fail "commit of 250 kB succeeded on a full disk"
  | Error e -> fail "commit: %s" (Fmt.str "%a" Store.pp_error e));
  (match Store.committed t o with
  | Some false -> ()
  | _ -> fail "file not left uncommitted after No_space");
  ok "destroy" (Store.destroy t (fst (List.hd files)));
  ok "destroy" (Store.destroy t (fst (List.nth files 1)));
  ok "destroy" (Store.destroy t (fst (List.nth files 2)));
  ok "commit after room was made" (Store.commit t o ~safe:true);
  say "recommitted %d\n" o;
  Store.close t

let lock dir =
  match Store.open_ ~clock dir with
  | Ok (t, _) ->
      say "opened\n";
      Store.close t
  | Error `Locked -> say "locked\n"
  | Error (`Io m) -> fail "open: %s" m

let () =
  match Array.to_list Sys.argv |> List.tl with
  | [ "upload"; dir; seed; n; k ] ->
      upload dir (int_of_string seed) (int_of_string n) (int_of_string k)
  | [ "fill"; dir ] -> fill dir
  | [ "lock"; dir ] -> lock dir
  | _ -> fail "usage: capfs_child upload DIR SEED NFILES KILL_AT | fill DIR | lock DIR"
