open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module Proc = Bench_proc

(* {1 Failures and commands} *)

exception Failed of string

let fail fmt = Printf.ksprintf (fun s -> raise (Failed s)) fmt
let ok = function Ok x -> x | Error e -> raise (Failed e)
let sh fmt = Printf.ksprintf (fun cmd -> ignore (ok (Proc.run cmd))) fmt
let quiet fmt = Printf.ksprintf Proc.quiet fmt
let check_interrupted () = if !Proc.interrupted then fail "interrupted"
let program name () = Sys.command ("command -v " ^ name ^ " >/dev/null 2>&1") = 0

let impossible ~root needs =
  if Unix.geteuid () <> 0 then Some ("not root: " ^ root)
  else if not (Sys.file_exists "/dev/net/tun") then Some "/dev/net/tun is missing"
  else if not (program "ip" ()) then Some "the ip program (iproute2) is missing"
  else List.find_map (fun (there, why) -> if there () then None else Some why) needs

(* {1 The environment} *)

type env = {
  dir : string;
  ns_prefix : string;
  link_prefix : string;
  mutable namespaces : string list;
  mutable links : string list;
}

let tag = string_of_int (Unix.getpid ())
let ns_name env kind = env.ns_prefix ^ tag ^ "-" ^ kind
let link_name env kind = env.link_prefix ^ kind ^ tag

let rec remove_tree path =
  if Sys.file_exists path then
    if Sys.is_directory path then begin
      Array.iter (fun f -> remove_tree (Filename.concat path f)) (Sys.readdir path);
      Sys.rmdir path
    end
    else Sys.remove path

let write_file path text =
  let oc = open_out_bin path in
  output_string oc text;
  close_out oc

let compile env ?(libs = "") name source =
  let c = Filename.concat env.dir (name ^ ".c") and exe = Filename.concat env.dir name in
  write_file c source;
  sh "gcc -std=gnu11 -O2 -o %s %s%s" (Filename.quote exe) (Filename.quote c)
    (if libs = "" then "" else " " ^ libs);
  exe

let new_ns ?(v6 = false) env kind =
  let ns = ns_name env kind in
  env.namespaces <- ns :: env.namespaces;
  sh "ip netns add %s" ns;
  let off = if v6 then 0 else 1 in
  quiet
    "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=%d \
     net.ipv6.conf.default.disable_ipv6=%d"
    ns off off;
  sh "ip -n %s link set lo up" ns;
  ns

(* Every device is deleted with its namespace; one still in the root
   namespace (the move failed) is deleted by name. *)
let drop_namespaces env =
  List.iter (fun ns -> quiet "ip netns del %s" ns) env.namespaces;
  env.namespaces <- [];
  List.iter (fun l -> quiet "ip link del %s" l) env.links;
  env.links <- []

let lines cmd = match Proc.run cmd with Ok s -> String.split_on_char '\n' s | Error _ -> []
let first_word l = match String.split_on_char ' ' (String.trim l) with w :: _ -> w | [] -> ""
let starts p s = String.length s >= String.length p && String.sub s 0 (String.length p) = p
let namespaces () = List.map first_word (lines "ip netns list")

(* "N: NAME: ..." or "N: NAME@PEER: ..." *)
let link_name_of l =
  match String.split_on_char ':' l with
  | _ :: name :: _ -> Some (List.hd (String.split_on_char '@' (String.trim name)))
  | _ -> None

let link_names () = List.filter_map link_name_of (lines "ip -o link")
let digits s = s <> "" && String.for_all (fun c -> c >= '0' && c <= '9') s
let dead pid = pid <> tag && not (Sys.file_exists ("/proc/" ^ pid))

let sweep_stale_namespaces prefix =
  List.iter
    (fun l ->
      let ns = first_word l in
      let lp = String.length prefix in
      if String.length ns > lp && String.sub ns 0 lp = prefix then
        match String.split_on_char '-' (String.sub ns lp (String.length ns - lp)) with
        | [ pid; _ ] when digits pid && dead pid -> quiet "ip netns del %s" ns
        | _ -> ())
    (lines "ip netns list")

let sweep_stale_links prefixes =
  List.iter
    (fun l ->
      match link_name_of l with
      | Some name ->
          List.iter
            (fun p ->
              let lp = String.length p in
              if String.length name > lp && String.sub name 0 lp = p then
                let pid = String.sub name lp (String.length name - lp) in
                if digits pid && dead pid then quiet "ip link del %s" name)
            prefixes
      | None -> ())
    (lines "ip -o link")

(* {1 Kernel peers} *)

let fields ?(prefix = "RESULT") out =
  match Proc.result_fields out prefix with
  | Some f -> f
  | None -> fail "no %s line in:\n%s" prefix out

let field f k = match List.assoc_opt k f with Some v -> v | None -> fail "no %s= in a result" k

let float_field f k =
  match float_of_string_opt (field f k) with Some x -> x | None -> fail "bad %s=%s" k (field f k)

(* The sink and the source, alike in both peers. *)
let spawn_sink exe ~seconds ns port =
  Proc.spawn ~ns [ exe; "sink"; string_of_int port; Printf.sprintf "%.1f" (seconds +. 10.) ]

let spawn_source exe ?cc ~bytes ~seconds ns host port =
  Proc.spawn ~ns
    ([ exe; "source"; host; string_of_int port; string_of_int bytes; Printf.sprintf "%.1f" seconds ]
    @ Option.to_list cc)

(* {1 Consort's stack} *)

let with_stack ~mtu ~tap ?ip6 ~ip f =
  let up =
    ok
      (Result.map_error
         (fun (`Msg m) -> "starting the stack: " ^ m)
         (Up.start ~mtu ~udp_echo:[] ~udp_discard:[] ~tap ?ip6 ~ip ()))
  in
  Fun.protect ~finally:(fun () -> Up.stop up) (fun () -> f up)

(* A failure inside a loop callback: the loop would only log an exception,
   so it is kept here and ends the current wait. *)
let callback_failure = ref None

let perr what e =
  let m = Printf.sprintf "%s: %s" what (Fmt.str "%a" Protocol.pp_error e) in
  if !callback_failure = None then callback_failure := Some m;
  raise (Failed m)

(* Runs [loop] (our stack) until [until ()], the child's output ends too,
   or the time is up. *)
let run_with loop child ~timeout until =
  let fd = Proc.fd child in
  Loop.watch loop fd (fun () ->
      Proc.pump child;
      if Proc.eof child then Loop.unwatch loop fd);
  Loop.run
    ~until:(fun () ->
      (until () && Proc.eof child) || !Proc.interrupted || !callback_failure <> None)
    ~timeout:(Time.of_sec timeout) loop;
  if not (Proc.eof child) then Loop.unwatch loop fd;
  Option.iter (fun m -> fail "%s" m) !callback_failure;
  check_interrupted ()

let finish_with loop child ~timeout ~grace result what =
  run_with loop child ~timeout (fun () -> !result <> None);
  let out = ok (Proc.finish child ~timeout:grace) in
  match !result with Some r -> (r, out) | None -> fail "%s did not finish:\n%s" what out

module type TCP4 = sig
  module T : Tcp.S with type host = Ipv4_addr.t and type lower = Ipstack.Ip.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
end

let tcp_config ?(congestion = Tcp.default_config.congestion) ~buffer () =
  { Tcp.default_config with send_buffer = buffer; receive_buffer = buffer; congestion }

let tcp_created = function
  | Ok t -> t
  | Error e -> fail "TCP: %s" (Fmt.str "%a" Protocol.pp_error e)

let tcp4 ?congestion ~local ~seed ~buffer (up : Up.t) : (module TCP4) =
  let module P = struct
    type host = Ipv4_addr.t
    type lower_address = Ipv4.address
    type lower_pattern = Ipv4.address_pattern

    let local = Ipv4_addr.of_string_exn local
    let lower_address h = { Ipv4.dst = h; proto = 6 }
    let lower_pattern = { Ipv4.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Transport_checksum.ipv4 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv4_addr.equal
    let pp_host = Ipv4_addr.pp
    let clock = Consort_net_unix.Loop_clock.of_loop up.loop
    let rng = Rng.create seed
    let pool = up.pool
  end in
  let module T = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (P) in
  let tcp = tcp_created (T.create ~config:(tcp_config ?congestion ~buffer ()) up.stack.ip) in
  (module struct
    module T = T
    module Sock = Socket.Make (T)

    let tcp = tcp
  end)

(* {1 A run} *)

let run ~impossible ~sweep ~dir ~ns_prefix ~link_prefix ~programs ~env_of ~leftovers body =
  match impossible with
  | Some why -> Error why
  | None -> (
      Proc.interrupted := false;
      callback_failure := None;
      let flag _ = Proc.interrupted := true in
      let old_int = Sys.signal Sys.sigint (Sys.Signal_handle flag) in
      let old_term = Sys.signal Sys.sigterm (Sys.Signal_handle flag) in
      let restore () =
        Sys.set_signal Sys.sigint old_int;
        Sys.set_signal Sys.sigterm old_term
      in
      sweep ();
      match
        let dir = Filename.concat (Filename.get_temp_dir_name ()) (dir ^ tag) in
        remove_tree dir;
        Sys.mkdir dir 0o700;
        let env = { dir; ns_prefix; link_prefix; namespaces = []; links = [] } in
        match
          (* The kernel peers' shared part, which they include. *)
          write_file (Filename.concat dir "peer_common.h") Netbench_sources.peer_common;
          programs env
        with
        | exes -> exes
        | exception e ->
            remove_tree dir;
            raise e
      with
      | exception Failed e ->
          restore ();
          Error e
      | exes -> (
          let env = env_of exes in
          let result =
            Fun.protect
              ~finally:(fun () ->
                Proc.kill_all ();
                drop_namespaces env;
                remove_tree env.dir;
                restore ())
              (fun () ->
                match body exes with
                | r -> Ok r
                | exception Failed e -> Error e
                | exception Unix.Unix_error (e, f, a) ->
                    Error (Printf.sprintf "%s %s: %s" f a (Unix.error_message e)))
          in
          match (result, leftovers ()) with
          | result, [] -> result
          | result, l ->
              let e = match result with Error e -> e ^ "; " | Ok _ -> "" in
              Error (Printf.sprintf "%sleft behind after cleanup: %s" e (String.concat ", " l))))
