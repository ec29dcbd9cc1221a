(* consort cap put, get, cat (files by path through the directory graph) and consort cap shell. *)
open Cmdliner
open Consort_cap
module Dir = Consort_capdir.Dir
module Dir_client = Consort_capdir.Dir_client
module Path = Consort_capdir.Path
module Fs_client = Consort_capfs_server.Fs_client
module Loop = Consort_engine.Loop
module R = Rpc_udp

let rpc_config = Cap_common.rpc_config
let refused = Cap_common.refused
let unknown = Cap_common.unknown

(* One client of the directory and file servers, and the shell's current directory. *)
type session = {
  c : Dir_client.t;
  trans : Fs_client.trans;
  root : Cap.t;
  locate : string option;
  root_arg : string option;
  mutable cwd : string;
}

let with_session locate root f =
  match Cap_common.root_cap root with
  | Error m -> refused "%s" m
  | Ok r -> (
      let loop = Loop.create () in
      match R.open_node ~config:!rpc_config ?locate loop with
      | Error m -> refused "%s" m
      | Ok node ->
          Fun.protect
            ~finally:(fun () -> R.close node)
            (fun () ->
              let trans ~idempotent h d = R.Sync.trans node ~idempotent h d in
              f { c = Dir_client.create trans; trans; root = r; locate; root_arg = root; cwd = "/" })
      )

(* [absolute s p]: [p] from the current directory, with [..] taken out. *)
let absolute s p =
  let parts =
    if String.length p > 0 && p.[0] = '/' then Path.split p else Path.split s.cwd @ Path.split p
  in
  let rec norm acc = function
    | [] -> List.rev acc
    | ".." :: rest -> norm (match acc with [] -> [] | _ :: a -> a) rest
    | x :: rest -> norm (x :: acc) rest
  in
  "/" ^ String.concat "/" (norm [] parts)

let path_failed what p (e : Dir_client.error Path.error) =
  match e with
  | `Lookup (_, `Unknown _) -> unknown "%s %s: %a" what p (Path.pp_error Dir_client.pp_error) e
  | e -> refused "%s %s: %a" what p (Path.pp_error Dir_client.pp_error) e

let dir_failed what (e : Dir_client.error) =
  match e with
  | `Unknown _ -> unknown "%s: %a" what Dir_client.pp_error e
  | _ -> refused "%s: %a" what Dir_client.pp_error e

let fs_failed what (e : Fs_client.error) =
  match Fs_client.outcome e with
  | `Refused -> refused "%s: %a" what Fs_client.pp_error e
  | `Unknown -> unknown "%s: %a" what Fs_client.pp_error e

let is_dir s (cap : Cap.t) = Port.equal cap.port s.root.Cap.port

(* The bytes of the file [path] names, to [out]. *)
let read_file ~what s path out =
  let p = absolute s path in
  match Dir_client.resolve s.c s.root p with
  | Error e -> path_failed what p e
  | Ok cap when is_dir s cap -> refused "%s %s: a directory, not a file" what p
  | Ok cap -> (
      match Fs_client.get s.trans cap out with Ok _ -> 0 | Error e -> fs_failed (what ^ " " ^ p) e)

let cat s paths =
  let out d = print_string d in
  let st = List.fold_left (fun st p -> max st (read_file ~what:"cat" s p out)) 0 paths in
  flush stdout;
  st

(* [get s path local]: to standard output without [local]; else to [local], written beside it
   first and renamed once complete, so that a failed get leaves no partial file. *)
let get s path local =
  match local with
  | None | Some "-" ->
      let st = read_file ~what:"get" s path print_string in
      flush stdout;
      st
  | Some f -> (
      let part = f ^ ".part" in
      match open_out_bin part with
      | exception Sys_error m -> refused "get: %s" m
      | oc -> (
          let st =
            Fun.protect
              ~finally:(fun () -> close_out_noerr oc)
              (fun () ->
                try read_file ~what:"get" s path (output_string oc)
                with Sys_error m -> refused "get: writing %s: %s" f m)
          in
          if st <> 0 then (
            (try Sys.remove part with Sys_error _ -> ());
            st)
          else match Sys.rename part f with () -> 0 | exception Sys_error m -> refused "get: %s" m))

(* The file server new files go to: --fs (a capability or a path), else CONSORT_FS, else the
   capability linked at /sys/fs. *)
let fs_server s fs =
  let given = match fs with Some x -> Some x | None -> Sys.getenv_opt "CONSORT_FS" in
  match given with
  | Some x when Cap_common.is_cap x -> Cap_common.parse "--fs" x
  | Some x -> (
      match Dir_client.resolve s.c s.root (absolute s x) with
      | Ok c -> Ok c
      | Error e -> Error (Fmt.str "--fs %s: %s" x (Cap_common.path_error e)))
  | None -> (
      match Dir_client.resolve s.c s.root "/sys/fs" with
      | Ok c -> Ok c
      | Error e ->
          Error
            (Fmt.str "no file server: give --fs, set CONSORT_FS, or link one at /sys/fs (%s)"
               (Cap_common.path_error e)))

let default_masks = Consort_capdir.Dir.default_masks Consort_capdir.Dir.File

(* [put s ~fs ~force local path]: the file [local] ([-]: standard input) stored on the file server
   and linked at [path]. Without [force] the name must be free, and the link is installed only if
   the directory has not changed since it was seen free. A file that could not be linked is
   destroyed again. Prints the file's capability. *)
let put s ~fs ~force ~masks local path =
  let p = absolute s path in
  match Path.parent p with
  | None -> refused "put: %S names the root directory" p
  | Some (parent, name) -> (
      match (Dir_client.resolve s.c s.root parent, fs_server s fs) with
      | Error e, _ -> path_failed "put" parent e
      | _, Error m -> refused "put: %s" m
      | Ok d, Ok server -> (
          let expect =
            if force then Ok None
            else
              match Dir_client.call s.c (Dir.List d) with
              | Ok (Dir.Listing { seq; rows; _ }) ->
                  if List.mem_assoc name rows then Error `Exists else Ok (Some seq)
              | _ -> (
                  (* No right to list: a lookup says whether the name is taken. *)
                  match Dir_client.lookup s.c d name with
                  | Error (`Dir (Dir.Not_found _)) -> Ok None
                  | Ok _ -> Error `Exists
                  | Error e -> Error (`Dir e))
          in
          match expect with
          | Error `Exists -> refused "put %s: exists (--force replaces it)" p
          | Error (`Dir e) -> dir_failed ("put " ^ p) e
          | Ok expect -> (
              let ic =
                if local = "-" then Ok stdin
                else try Ok (open_in_bin local) with Sys_error m -> Error m
              in
              match ic with
              | Error m -> refused "put: %s" m
              | Ok ic -> (
                  let size =
                    if local = "-" then max_int
                    else try in_channel_length ic with Sys_error _ -> max_int
                  in
                  let read_error = ref None in
                  let input b off len =
                    try input ic b off len
                    with Sys_error m ->
                      read_error := Some m;
                      0
                  in
                  let r = Fs_client.put s.trans ~server ~size input in
                  if local <> "-" then close_in_noerr ic;
                  match (r, !read_error) with
                  | Ok c, Some m ->
                      ignore (Fs_client.destroy s.trans c);
                      refused "put: %s: %s" local m
                  | Error e, _ -> fs_failed "put" e
                  | Ok cap, None -> (
                      match
                        Dir_client.call s.c
                          (Dir.Install
                             { dir = d; expect; rows = [ { Dir.name; masks; caps = [ cap ] } ] })
                      with
                      | Ok _ ->
                          print_endline (Cap.to_string cap);
                          0
                      | Error e -> (
                          (match e with
                          | `Unknown _ -> ()
                          | _ -> ignore (Fs_client.destroy s.trans cap));
                          match e with
                          | `Dir (Dir.Conflict _) ->
                              refused "put %s: the directory changed meanwhile; nothing stored" p
                          | e -> dir_failed ("put " ^ p) e))))))

(* The names in the directory of [word]'s directory part that start with its last part, each with
   that directory part in front. *)
let complete s word =
  let dir_part, prefix =
    match String.rindex_opt word '/' with
    | Some i -> (String.sub word 0 (i + 1), String.sub word (i + 1) (String.length word - i - 1))
    | None -> ("", word)
  in
  match Dir_client.resolve s.c s.root (absolute s (if dir_part = "" then "." else dir_part)) with
  | Error _ -> []
  | Ok d -> (
      match Dir_client.call s.c (Dir.List d) with
      | Ok (Dir.Listing { rows; _ }) ->
          List.filter_map
            (fun (n, _) ->
              if
                String.length n >= String.length prefix
                && String.sub n 0 (String.length prefix) = prefix
              then Some (dir_part ^ n)
              else None)
            rows
          |> List.sort compare
      | _ -> [])

let common_prefix = function
  | [] -> ""
  | x :: rest ->
      List.fold_left
        (fun p y ->
          let n = min (String.length p) (String.length y) in
          let rec go i = if i < n && p.[i] = y.[i] then go (i + 1) else i in
          String.sub p 0 (go 0))
        x rest

(* Words of a shell line: blanks separate them, double quotes group. *)
let words line =
  let b = Buffer.create 16 and acc = ref [] and quoted = ref false and any = ref false in
  let flush () =
    if !any then acc := Buffer.contents b :: !acc;
    Buffer.clear b;
    any := false
  in
  String.iter
    (fun ch ->
      match ch with
      | '"' ->
          quoted := not !quoted;
          any := true
      | (' ' | '\t') when not !quoted -> flush ()
      | ch ->
          Buffer.add_char b ch;
          any := true)
    line;
  flush ();
  List.rev !acc

let help =
  {|commands (paths are from the current directory, or from the root with a leading /):
  ls [PATH]                 list a directory
  cd [PATH]                 change directory (to / without PATH)
  pwd                       print the current directory
  cat PATH...               print files
  get PATH [LOCAL]          copy a file here (to standard output without LOCAL)
  put LOCAL PATH [--force]  store a local file and link it at PATH
  mkdir PATH                make a directory
  rm PATH                   remove a row
  chmod PATH MASK:MASK:...  set a row's column masks
  exec SERVER PROGRAM ARG...  run a program on a process server (paths or capabilities)
  ps SERVER                 list a process server's processes
  kill PROCESS [SIGNAL]     signal a process
  complete WORD             the names Tab would complete WORD with
  help, exit
|}

(* Runs this program's own command for exec, ps and kill: their terminal handling is theirs. *)
let run_self s args =
  let resolve_arg a = if Cap_common.is_cap a then a else absolute s a in
  let args =
    match args with cmd :: a :: rest when cmd <> "kill" -> cmd :: resolve_arg a :: rest | l -> l
  in
  let args =
    match args with
    | "exec" :: sv :: prog :: rest -> "exec" :: sv :: resolve_arg prog :: rest
    | l -> l
  in
  let locate = match s.locate with Some l -> [ "--locate"; l ] | None -> [] in
  let root = match s.root_arg with Some r -> [ "--root"; r ] | None -> [] in
  let argv =
    Array.of_list
      ((Sys.executable_name :: "cap" :: List.hd args :: (if List.hd args = "exec" then root else []))
      @ locate @ List.tl args)
  in
  flush stdout;
  match Unix.create_process Sys.executable_name argv Unix.stdin Unix.stdout Unix.stderr with
  | exception Unix.Unix_error (e, _, _) -> refused "%s: %s" (List.hd args) (Unix.error_message e)
  | pid -> (
      match Unix.waitpid [] pid with
      | _, Unix.WEXITED n -> n
      | _, (Unix.WSIGNALED n | Unix.WSTOPPED n) -> 128 + abs n)

let command s = function
  | [] -> Some 0
  | [ ("exit" | "quit") ] -> None
  | [ "help" ] ->
      print_string help;
      Some 0
  | [ "pwd" ] ->
      print_endline s.cwd;
      Some 0
  | [ "complete"; w ] ->
      List.iter print_endline (complete s w);
      Some 0
  | "cd" :: ([] | [ _ ]) as l -> (
      let p = absolute s (match l with [ _; p ] -> p | _ -> "/") in
      match Dir_client.resolve s.c s.root p with
      | Error e -> Some (path_failed "cd" p e)
      | Ok cap when not (is_dir s cap) -> Some (refused "cd %s: not a directory" p)
      | Ok _ ->
          s.cwd <- p;
          Some 0)
  | "ls" :: ([] | [ _ ]) as l ->
      let p = absolute s (match l with [ _; p ] -> p | _ -> ".") in
      Some (Dir_cmd.ls_in s.c s.root p)
  | "cat" :: (_ :: _ as paths) -> Some (cat s paths)
  | [ "get"; p ] -> Some (get s p None)
  | [ "get"; p; l ] -> Some (get s p (Some l))
  | [ "put"; l; p ] -> Some (put s ~fs:None ~force:false ~masks:default_masks l p)
  | [ "put"; l; p; "--force" ] | [ "put"; "--force"; l; p ] ->
      Some (put s ~fs:None ~force:true ~masks:default_masks l p)
  | [ "mkdir"; p ] -> Some (Dir_cmd.mkdir_in s.c s.root (absolute s p) None)
  | [ "rm"; p ] -> Some (Dir_cmd.rm_in s.c s.root (absolute s p))
  | [ "chmod"; p; m ] -> Some (Dir_cmd.chmod_in s.c s.root (absolute s p) m)
  | ("exec" :: _ :: _ :: _ | [ "ps"; _ ] | "kill" :: ([ _ ] | [ _; _ ])) as l ->
      let l = match l with [ "kill"; p; sg ] -> [ "kill"; p; "--signal"; sg ] | l -> l in
      Some (run_self s l)
  | w :: _ -> Some (refused "%s: unknown command or wrong arguments (help lists them)" w)

(* A line from a terminal, with Tab completing the last word from the directory graph. *)
let read_line_tty s prompt =
  let fd = Unix.stdin in
  let saved = Unix.tcgetattr fd in
  let raw = { saved with Unix.c_icanon = false; c_echo = false; c_vmin = 1; c_vtime = 0 } in
  Unix.tcsetattr fd Unix.TCSANOW raw;
  Fun.protect ~finally:(fun () -> Unix.tcsetattr fd Unix.TCSANOW saved) @@ fun () ->
  let b = Buffer.create 64 in
  let out str =
    print_string str;
    flush stdout
  in
  out prompt;
  let one = Bytes.create 1 in
  let rec loop () =
    match Unix.read fd one 0 1 with
    | 0 -> if Buffer.length b = 0 then None else Some (Buffer.contents b)
    | _ -> (
        match Bytes.get one 0 with
        | '\n' | '\r' ->
            out "\n";
            Some (Buffer.contents b)
        | '\004' when Buffer.length b = 0 ->
            out "\n";
            None
        | '\003' ->
            Buffer.clear b;
            out ("^C\n" ^ prompt);
            loop ()
        | '\127' | '\b' ->
            if Buffer.length b > 0 then (
              Buffer.truncate b (Buffer.length b - 1);
              out "\b \b");
            loop ()
        | '\t' ->
            let line = Buffer.contents b in
            let start = match String.rindex_opt line ' ' with Some i -> i + 1 | None -> 0 in
            let word = String.sub line start (String.length line - start) in
            (match complete s word with
            | [] -> out "\007"
            | [ one_ ] ->
                let add =
                  String.sub one_ (String.length word) (String.length one_ - String.length word)
                in
                Buffer.add_string b add;
                out add
            | many ->
                let p = common_prefix many in
                let add =
                  String.sub p (String.length word) (String.length p - String.length word)
                in
                if add <> "" then (
                  Buffer.add_string b add;
                  out add)
                else out ("\n" ^ String.concat "  " many ^ "\n" ^ prompt ^ Buffer.contents b));
            loop ()
        | '\027' ->
            (* An escape sequence (arrows): ignored. *)
            ignore (Unix.read fd one 0 1);
            ignore (Unix.read fd one 0 1);
            loop ()
        | c when Char.code c >= 32 ->
            Buffer.add_char b c;
            out (String.make 1 c);
            loop ()
        | _ -> loop ())
  in
  loop ()

(* The shell: from a terminal with a prompt and completion, else line by line (its status is the
   last command's). *)
let shell locate root =
  Consort_cli.with_stdin "cap shell" @@ fun () ->
  with_session locate root (fun s ->
      let tty = Unix.isatty Unix.stdin && Unix.isatty Unix.stdout in
      let rec go last =
        let line =
          if tty then read_line_tty s (Printf.sprintf "consort:%s> " s.cwd)
          else try Some (input_line stdin) with End_of_file -> None
        in
        match line with
        | None -> last
        | Some l -> ( match command s (words l) with None -> last | Some st -> go st)
      in
      go 0)

(* The command line. *)

let locate = Dir_cmd.locate
let root = Dir_cmd.root

let envs =
  Dir_cmd.envs
  @ [
      Cmd.Env.info "CONSORT_FS"
        ~doc:
          "The file server new files go to (a capability or a path), when $(b,--fs) is not given.";
    ]

let exits =
  Cap_common.exits_with
    ~refused:
      "refused (no such name, not a file, too few rights, bad capability...): nothing was done."
    ~unknown:"outcome unknown: a server became unreachable during the request."

let configured t = Cap_common.configured t

let cmd name ~doc term =
  Cmd.v (Consort_cli.info ~path:("cap " ^ name) name ~exits ~envs ~doc) (configured term)

let paths_arg = Arg.(non_empty & pos_all string [] & info [] ~docv:"PATH" ~doc:"Paths of files.")

let cat_cmd =
  cmd "cat" ~doc:"Print files named by path from the root directory."
    Term.(const (fun l r p () -> with_session l r (fun s -> cat s p)) $ locate $ root $ paths_arg)

let get_cmd =
  let path =
    Arg.(required & pos 0 (some string) None & info [] ~docv:"PATH" ~doc:"The file's path.")
  in
  let local =
    Arg.(
      value
      & pos 1 (some string) None
      & info [] ~docv:"LOCAL" ~doc:"Where to write it (default: standard output).")
  in
  cmd "get" ~doc:"Copy a file named by path to a local file (written whole, or not at all)."
    Term.(
      const (fun l r p o () -> with_session l r (fun s -> get s p o)) $ locate $ root $ path $ local)

let put_cmd =
  let local =
    Arg.(
      required
      & pos 0 (some string) None
      & info [] ~docv:"LOCAL" ~doc:"The file to store ($(b,-): standard input).")
  in
  let path =
    Arg.(required & pos 1 (some string) None & info [] ~docv:"PATH" ~doc:"Where to link it.")
  in
  let fs =
    Arg.(
      value
      & opt (some string) None
      & info [ "fs" ] ~docv:"CAP|PATH"
          ~doc:
            "The file server (default: $(b,CONSORT_FS), then the capability linked at \
             $(b,/sys/fs)).")
  in
  let force = Arg.(value & flag & info [ "force"; "f" ] ~doc:"Replace a row of that name.") in
  let masks =
    Arg.(
      value
      & opt (some string) None
      & info [ "masks" ] ~docv:"MASK:MASK:..."
          ~doc:"The row's column masks, as $(b,consort cap mkdir --masks).")
  in
  let run l r local p fs force masks () =
    match Option.fold ~none:(Ok default_masks) ~some:Dir_cmd.parse_masks masks with
    | Error e -> refused "put: --masks: %s" e
    | Ok masks -> with_session l r (fun s -> put s ~fs ~force ~masks local p)
  in
  cmd "put"
    ~doc:
      "Store a local file on a file server and link it at PATH, in bounded chunks; prints its \
       capability. The name must be free unless $(b,--force)."
    Term.(const run $ locate $ root $ local $ path $ fs $ force $ masks)

let shell_cmd =
  cmd "shell"
    ~doc:
      "An interactive shell over the directory graph (ls, cd, cat, get, put, mkdir, rm, chmod, \
       exec, ps, kill; $(b,help) lists them), with Tab completing names. Reads commands line by \
       line when standard input is not a terminal; its status is then the last command's."
    Term.(const (fun l r () -> shell l r) $ locate $ root)

let commands = [ put_cmd; get_cmd; cat_cmd; shell_cmd ]
