type t = {
  pid : int;
  fd : Unix.file_descr;
  input : Unix.file_descr option;
  buf : Buffer.t;
  mutable eof : bool;
  mutable reaped : Unix.process_status option;
}

let live : t list ref = ref []
let interrupted = ref false

let spawn ?ns ?(stdin = false) argv =
  let argv = match ns with Some ns -> "ip" :: "netns" :: "exec" :: ns :: argv | None -> argv in
  let out_r, out_w = Unix.pipe ~cloexec:true () in
  let in_r, in_w =
    if stdin then
      let r, w = Unix.pipe ~cloexec:true () in
      (r, Some w)
    else (Unix.openfile "/dev/null" [ O_RDONLY; O_CLOEXEC ] 0, None)
  in
  let close_child_ends () =
    Unix.close out_w;
    Unix.close in_r
  in
  match Unix.create_process (List.hd argv) (Array.of_list argv) in_r out_w out_w with
  | exception e ->
      close_child_ends ();
      Unix.close out_r;
      Option.iter Unix.close in_w;
      raise e
  | pid ->
      close_child_ends ();
      Unix.set_nonblock out_r;
      let t =
        { pid; fd = out_r; input = in_w; buf = Buffer.create 256; eof = false; reaped = None }
      in
      live := t :: !live;
      t

let pid t = t.pid
let fd t = t.fd
let eof t = t.eof
let output t = Buffer.contents t.buf
let chunk = Bytes.create 4096

let pump t =
  let rec go () =
    if not t.eof then
      match Unix.read t.fd chunk 0 (Bytes.length chunk) with
      | 0 ->
          t.eof <- true;
          Unix.close t.fd
      | n ->
          Buffer.add_subbytes t.buf chunk 0 n;
          go ()
      | exception Unix.Unix_error ((EAGAIN | EWOULDBLOCK | EINTR), _, _) -> ()
  in
  go ()

let starts_with ~prefix s =
  String.length s >= String.length prefix && String.sub s 0 (String.length prefix) = prefix

let complete_lines t =
  let s = output t in
  let lines = String.split_on_char '\n' s in
  (* The last piece is a line only once the output has ended. *)
  if t.eof then lines else List.rev (List.tl (List.rev lines))

let find_line t ~prefix = List.find_opt (starts_with ~prefix) (complete_lines t)
let now () = Unix.gettimeofday ()

(* Waits for more output until [ready ()] or [deadline]. *)
let wait_until t ~deadline ready =
  let rec go () =
    pump t;
    if ready () then true
    else if t.eof || !interrupted then ready ()
    else
      let left = deadline -. now () in
      if left <= 0. then false
      else begin
        (try ignore (Unix.select [ t.fd ] [] [] (min left 0.2))
         with Unix.Unix_error (EINTR, _, _) -> ());
        go ()
      end
  in
  go ()

let wait t ~timeout ready = wait_until t ~deadline:(now () +. timeout) ready
let lines t ~prefix = List.filter (starts_with ~prefix) (complete_lines t)

let wait_line t ~prefix ~timeout =
  if wait_until t ~deadline:(now () +. timeout) (fun () -> find_line t ~prefix <> None) then
    Ok (Option.get (find_line t ~prefix))
  else
    Error
      (Printf.sprintf "no %S line from process %d (%s):\n%s" prefix t.pid
         (if !interrupted then "interrupted" else if t.eof then "it ended" else "timed out")
         (output t))

let send_line t s =
  match t.input with
  | None -> invalid_arg "Bench_proc.send_line: no input pipe"
  | Some fd ->
      let s = s ^ "\n" in
      ignore (Unix.write_substring fd s 0 (String.length s))

let write t b off len =
  match t.input with
  | None -> invalid_arg "Bench_proc.write: no input pipe"
  | Some fd ->
      let rec go off len =
        if len > 0 then
          match Unix.write fd b off len with
          | k -> go (off + k) (len - k)
          | exception Unix.Unix_error (EINTR, _, _) -> go off len
      in
      go off len

let close_stdin t =
  match t.input with Some fd -> ( try Unix.close fd with Unix.Unix_error _ -> ()) | None -> ()

let reap t =
  match t.reaped with
  | Some st -> st
  | None ->
      let rec wait () =
        try snd (Unix.waitpid [] t.pid) with Unix.Unix_error (EINTR, _, _) -> wait ()
      in
      let st = wait () in
      t.reaped <- Some st;
      live := List.filter (fun c -> c != t) !live;
      close_stdin t;
      if not t.eof then begin
        t.eof <- true;
        Unix.close t.fd
      end;
      st

let kill t =
  if t.reaped = None then begin
    (try Unix.kill t.pid Sys.sigkill with Unix.Unix_error _ -> ());
    ignore (reap t)
  end

let kill_all () = List.iter kill !live

let status_text = function
  | Unix.WEXITED n -> Printf.sprintf "exited with status %d" n
  | WSIGNALED n -> Printf.sprintf "killed by signal %d" n
  | WSTOPPED n -> Printf.sprintf "stopped by signal %d" n

let finish t ~timeout =
  if wait_until t ~deadline:(now () +. timeout) (fun () -> t.eof) then
    match reap t with
    | WEXITED 0 -> Ok (output t)
    | st -> Error (Printf.sprintf "process %d %s:\n%s" t.pid (status_text st) (output t))
  else begin
    kill t;
    Error
      (Printf.sprintf "process %d %s; killed:\n%s" t.pid
         (if !interrupted then "interrupted" else "timed out")
         (output t))
  end

let run cmd =
  let out = Filename.temp_file "consort-netbench" ".out" in
  let rc = Sys.command (Printf.sprintf "%s >%s 2>&1" cmd (Filename.quote out)) in
  let ic = open_in_bin out in
  let text = really_input_string ic (in_channel_length ic) in
  close_in ic;
  Sys.remove out;
  if rc = 0 then Ok text else Error (Printf.sprintf "command failed (%d): %s\n%s" rc cmd text)

let quiet cmd = ignore (Sys.command (cmd ^ " >/dev/null 2>&1"))

let result_fields output prefix =
  String.split_on_char '\n' output
  |> List.find_opt (starts_with ~prefix)
  |> Option.map (fun line ->
         String.split_on_char ' ' line
         |> List.filter_map (fun w ->
                match String.index_opt w '=' with
                | Some i -> Some (String.sub w 0 i, String.sub w (i + 1) (String.length w - i - 1))
                | None -> None))
