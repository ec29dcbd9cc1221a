module Log = Consort_spec.Log

type member = {
  idx : int;
  addr : string;
  dir : string;
  mutable pid : int option;
  mutable input : out_channel option;
  mutable incarnation : int;
  mutable logs : string list; (* one file per incarnation, newest first *)
}

let free_ports n =
  let socks =
    List.init n (fun _ ->
        let s = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
        Unix.bind s (Unix.ADDR_INET (Unix.inet_addr_loopback, 0));
        s)
  in
  let ports =
    List.map
      (fun s -> match Unix.getsockname s with Unix.ADDR_INET (_, p) -> p | Unix.ADDR_UNIX _ -> 0)
      socks
  in
  List.iter Unix.close socks;
  ports

let drop_file m = Filename.concat m.dir (Printf.sprintf "drop-%d" m.idx)

let create_at ~dir addrs =
  List.mapi
    (fun idx addr ->
      let m = { idx; addr; dir; pid = None; input = None; incarnation = 0; logs = [] } in
      let oc = open_out (drop_file m) in
      close_out oc;
      m)
    addrs

let create ~dir n = create_at ~dir (List.map (Printf.sprintf "127.0.0.1:%d") (free_ports n))

let start ~exe ?(wrap = []) ?(extra = []) ?(params = "") ?(props = "vsync") ~group ~peers
    ?(output = "/dev/null") m =
  m.incarnation <- m.incarnation + 1;
  let log = Filename.concat m.dir (Printf.sprintf "member-%d.%d.log" m.idx m.incarnation) in
  m.logs <- log :: m.logs;
  let r, w = Unix.pipe ~cloexec:true () in
  let out =
    Unix.openfile output [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_APPEND; Unix.O_CLOEXEC ] 0o644
  in
  let args =
    wrap
    @ [
        exe;
        "member";
        "--group";
        group;
        "--props";
        props;
        "--bind";
        m.addr;
        "--peers";
        (if peers = [] then "none" else String.concat "," peers);
        "--log";
        log;
        "--drop-file";
        drop_file m;
        "--seed";
        string_of_int ((m.idx * 1000) + m.incarnation);
      ]
    @ (if params = "" then [] else [ "--params"; params ])
    @ extra
  in
  let prog = List.hd args in
  let pid = Unix.create_process prog (Array.of_list args) r out out in
  Unix.close r;
  Unix.close out;
  m.pid <- Some pid;
  m.input <- Some (Unix.out_channel_of_descr w)

let cast m line =
  match m.input with
  | Some oc -> (
      try
        output_string oc line;
        output_char oc '\n';
        flush oc
      with Sys_error _ -> ())
  | None -> ()

let reap m =
  match m.pid with
  | Some pid -> (
      match Unix.waitpid [ Unix.WNOHANG ] pid with
      | 0, _ -> false
      | _ ->
          m.pid <- None;
          true
      | exception Unix.Unix_error (Unix.ECHILD, _, _) ->
          m.pid <- None;
          true)
  | None -> true

let close_input m =
  match m.input with
  | Some oc ->
      (try close_out oc with Sys_error _ -> ());
      m.input <- None
  | None -> ()

let kill m =
  close_input m;
  match m.pid with
  | Some pid ->
      (try Unix.kill pid Sys.sigkill with Unix.Unix_error _ -> ());
      (try ignore (Unix.waitpid [] pid) with Unix.Unix_error _ -> ());
      m.pid <- None
  | None -> ()

let rec wait_until ~timeout f =
  if f () then true
  else if timeout <= 0. then false
  else begin
    Unix.sleepf 0.05;
    wait_until ~timeout:(timeout -. 0.05) f
  end

let leave_all ms ~timeout =
  List.iter close_input ms;
  let ok = wait_until ~timeout (fun () -> List.for_all reap ms) in
  List.iter kill ms;
  ok

let partition groups =
  List.iter
    (fun side ->
      let others = List.filter (fun m -> not (List.memq m side)) (List.concat groups) in
      List.iter
        (fun m ->
          let oc = open_out (drop_file m) in
          List.iter (fun o -> output_string oc (o.addr ^ "\n")) others;
          close_out oc)
        side)
    groups

let heal ms =
  List.iter
    (fun m ->
      let oc = open_out (drop_file m) in
      close_out oc)
    ms

let read_lines file =
  match open_in_bin file with
  | exception Sys_error _ -> []
  | ic ->
      let rec go acc =
        match input_line ic with l -> go (l :: acc) | exception End_of_file -> List.rev acc
      in
      let l = go [] in
      close_in ic;
      l

(* Complete lines only: a member may be writing the last one. *)
let events file = List.filter_map (fun l -> Result.to_option (Log.of_line l)) (read_lines file)

let current_view m =
  match m.logs with
  | [] -> None
  | log :: _ ->
      List.fold_left
        (fun acc e ->
          match e with Log.View { view; members; _ } -> Some (view, members) | _ -> acc)
        None (events log)

let same_view ms =
  match List.map current_view ms with
  | Some (v, members) :: rest ->
      List.length members = List.length ms && List.for_all (fun x -> x = Some (v, members)) rest
  | _ -> false

let all_logs ms = List.concat_map (fun m -> List.rev m.logs) ms

let deliveries m =
  match m.logs with
  | [] -> 0
  | log :: _ ->
      List.length (List.filter (function Log.Deliver _ -> true | _ -> false) (events log))

let remove_dir dir =
  (match Sys.readdir dir with
  | files ->
      Array.iter (fun f -> try Sys.remove (Filename.concat dir f) with Sys_error _ -> ()) files
  | exception Sys_error _ -> ());
  try Unix.rmdir dir with Unix.Unix_error _ -> ()
