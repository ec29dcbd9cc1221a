(* consortd: the daemon holding the group stacks of local clients. *)

open Cmdliner
module Server = Consort_daemon.Server
module Seal = Consort_seal.Seal

(* At most [per_second] log lines a second: under heavy churn the groups'
   warnings would flood a service manager's journal. What is dropped is
   counted and said in one record of the daemon's own (in the log's format:
   one JSON object in a JSON log) when lines flow again. *)
let limit_src = Logs.Src.create "consortd" ~doc:"consortd's log rate limit"

let rate_limited ~per_second (r : Logs.reporter) =
  let second = ref 0 and lines = ref 0 and dropped = ref 0 in
  let report src level ~over k msgf =
    let now = int_of_float (Unix.gettimeofday ()) in
    if now <> !second then begin
      second := now;
      lines := 0;
      if !dropped > 0 then begin
        let n = !dropped in
        dropped := 0;
        Server.outside_members (fun () ->
            r.Logs.report limit_src Logs.Warning ~over:ignore
              (fun () -> ())
              (fun m -> m "%d log lines dropped (more than %d a second)" n per_second))
      end
    end;
    incr lines;
    if !lines <= per_second then r.Logs.report src level ~over k msgf
    else begin
      incr dropped;
      over ();
      k ()
    end
  in
  { Logs.report }

let setup_logs ((levels, format), verbose) =
  Consort_cli.setup_logs ~verbose format levels;
  Consort_cli.set_log_context Server.log_context;
  Logs.set_reporter (rate_limited ~per_second:50 (Logs.reporter ()))

(* "0660" (octal, as chmod takes it). *)
let parse_mode s =
  match int_of_string_opt ("0o" ^ s) with
  | Some m when m >= 0 && m <= 0o777 && s <> "" && s.[0] <> '-' && s.[0] <> '+' -> Ok m
  | _ -> Error (Printf.sprintf "--socket-mode %s: not an octal file mode (0660, 0600, ...)" s)

(* Uids or user names, gids or group names. *)
let parse_ids what lookup l =
  let rec go acc = function
    | [] -> Ok (List.rev acc)
    | x :: rest -> (
        let x = String.trim x in
        match int_of_string_opt x with
        | Some n when n >= 0 -> go (n :: acc) rest
        | Some _ -> Error (Printf.sprintf "--%s %s: not an id" what x)
        | None -> (
            match lookup x with
            | n -> go (n :: acc) rest
            | exception Not_found -> Error (Printf.sprintf "--%s %s: no such name here" what x)))
  in
  go [] l

let main socket (socket_mode, allow_uid, allow_gid, token) tcp bind ports peers key max_frame
    max_queue max_queued max_clients max_members hello_timeout spin_us spin_yield
    (control, metrics, metrics_public, pcap) (http, http_public) verbose =
  setup_logs verbose;
  let auth =
    let ( let* ) = Result.bind in
    let* mode = parse_mode socket_mode in
    let* uids =
      parse_ids "allow-uid"
        (fun n -> (Unix.getpwnam n).Unix.pw_uid)
        (Option.value ~default:[] allow_uid)
    in
    let* gids =
      match allow_gid with
      | None -> Ok Server.default.allow_gids
      | Some l -> parse_ids "allow-gid" (fun n -> (Unix.getgrnam n).Unix.gr_gid) l
    in
    let* token =
      match token with
      | None -> Ok None
      | Some f ->
          Result.map Option.some (Result.map_error (fun e -> "--token: " ^ e) (Server.read_token f))
    in
    Ok (mode, Server.default.allow_uids @ uids, gids, token)
  in
  match auth with
  | Error e ->
      Fmt.epr "consortd: %s@." e;
      2
  | Ok (socket_mode, allow_uids, allow_gids, token) -> (
      let seal =
        match key with
        | None -> Ok None
        | Some file -> (
            match Seal.read_key file with
            | Error e -> Error ("--key: " ^ e)
            | Ok s -> Ok (Some (s, Seal.Auth)))
      in
      match seal with
      | Error e ->
          Fmt.epr "consortd: %s@." e;
          2
      | Ok seal -> (
          if max_frame < 1024 || max_frame > 1 lsl 30 then begin
            Fmt.epr "consortd: --max-frame %d: between 1024 and 2^30 bytes@." max_frame;
            2
          end
          else if max_queue < max_frame || max_queue > 1 lsl 32 then begin
            Fmt.epr "consortd: --max-queue %d: at least --max-frame (%d) and at most 4 GiB@."
              max_queue max_frame;
            2
          end
          else if max_queued < max_frame || max_queued > 1 lsl 40 then begin
            Fmt.epr "consortd: --max-queued %d: at least --max-frame (%d) and at most 1 TiB@."
              max_queued max_frame;
            2
          end
          else if not (hello_timeout > 0. && hello_timeout <= 3600.) then begin
            Fmt.epr "consortd: --hello-timeout %g: between 0 and 3600 seconds@." hello_timeout;
            2
          end
          else if spin_us < 0 || spin_us > 10_000 then begin
            Fmt.epr "consortd: --spin-us %d: between 0 and 10000@." spin_us;
            2
          end
          else if max_clients < 1 || max_members < 1 then begin
            Fmt.epr "consortd: --max-clients and --max-members must be at least 1@.";
            2
          end
          else
            let cfg =
              {
                Server.socket;
                socket_mode;
                allow_uids;
                allow_gids;
                tcp;
                token;
                bind;
                ports;
                peers = Option.value ~default:[] peers;
                seal;
                max_frame;
                max_queue;
                max_queued;
                max_clients;
                max_members;
                hello_timeout;
                spin_us;
                spin_yield;
                control;
                metrics;
                metrics_public;
                http;
                http_public;
                pcap;
              }
            in
            match Server.run cfg with
            | Ok () -> 0
            | Error e ->
                Fmt.epr "consortd: %s@." e;
                2
            | exception e ->
                Fmt.epr "consortd: internal error: %s@."
                  (String.map (function '\n' -> ' ' | c -> c) (Printexc.to_string e));
                125))

let cmd =
  let socket =
    Arg.(
      value
      & opt (some string) None
      & info [ "socket" ] ~docv:"PATH" ~doc:"Listen for clients on this Unix socket.")
  in
  let auth =
    let socket_mode =
      Arg.(
        value & opt string "0660"
        & info [ "socket-mode" ] ~docv:"MODE"
            ~doc:
              "The mode of the $(b,--socket) file, in octal, whatever the umask: who may connect \
               to it at all. Whoever connects is then checked by its credentials (see \
               $(b,--allow-uid)).")
    in
    let allow_uid =
      Arg.(
        value
        & opt (some (list string)) None
        & info [ "allow-uid" ] ~docv:"USER,..."
            ~doc:
              "Users (names or uids) allowed on the $(b,--socket), besides root and the daemon's \
               own user: the daemon checks each connection's peer credentials (SO_PEERCRED) and \
               refuses the others (ERROR $(b,not-allowed)).")
    in
    let allow_gid =
      Arg.(
        value
        & opt (some (list string)) None
        & info [ "allow-gid" ] ~docv:"GROUP,..."
            ~doc:
              "Groups (names or gids) whose members (by their primary or a supplementary group) \
               are allowed on the $(b,--socket). Default: the daemon's own group.")
    in
    let token =
      Arg.(
        value
        & opt (some string) None
        & info [ "token" ] ~docv:"FILE"
            ~doc:
              "A secret that clients over $(b,--tcp) must present in HELLO (its text, at least 16 \
               bytes; mode 0600, owned by the daemon's user or root; $(b,consort keygen FILE) \
               writes one). Required with $(b,--tcp) and $(b,--key): any local user can connect to \
               a TCP port.")
    in
    Term.(const (fun m u g t -> (m, u, g, t)) $ socket_mode $ allow_uid $ allow_gid $ token)
  in
  let tcp =
    Arg.(
      value
      & opt (some string) None
      & info [ "tcp" ] ~docv:"127.0.0.1:PORT"
          ~doc:"Also listen for clients over TCP on this loopback address.")
  in
  let bind =
    Arg.(
      value & opt string Server.default.bind
      & info [ "bind" ] ~docv:"ADDR:PORT"
          ~doc:
            "The members' UDP address and the first port of their range: each member the daemon \
             holds takes the first free port of it.")
  in
  let ports =
    Arg.(
      value & opt int Server.default.ports
      & info [ "ports" ] ~docv:"N" ~doc:"The size of the members' port range.")
  in
  let peers =
    Arg.(
      value
      & opt (some (list string)) None
      & info [ "peers" ] ~docv:"ADDR:PORT[-PORT],..."
          ~doc:
            "Where to look for the groups' members on other machines (other daemons' ranges, \
             members), unless a client's JOIN names its own.")
  in
  let key =
    Arg.(
      value
      & opt (some string) None
      & info [ "key" ] ~docv:"FILE"
          ~doc:
            "The groups' secret (from $(b,consort keygen), mode 0600, owned by the daemon's user \
             or root): every member seals its datagrams (Auth; Privacy when a client asks), its \
             stack's under a key of each view (Rekey) unless the client's params say \
             seal.rekey=false, as $(b,consort member --key) does.")
  in
  let max_frame =
    Arg.(
      value & opt int Server.default.max_frame
      & info [ "max-frame" ] ~docv:"BYTES" ~doc:"The largest frame a client may send.")
  in
  let max_queue =
    Arg.(
      value & opt int Server.default.max_queue
      & info [ "max-queue" ] ~docv:"BYTES"
          ~doc:"Bytes of upcalls a client may leave unread before it is failed out of its groups.")
  in
  let max_queued =
    Arg.(
      value & opt int Server.default.max_queued
      & info [ "max-queued" ] ~docv:"BYTES"
          ~doc:
            "Bytes of upcalls all clients together may leave unread: over it, the client that \
             leaves the most is failed out of its groups (ERROR $(b,overloaded)).")
  in
  let max_clients =
    Arg.(
      value
      & opt int Server.default.max_clients
      & info [ "max-clients" ] ~docv:"N" ~doc:"Clients at once.")
  in
  let max_members =
    Arg.(
      value
      & opt int Server.default.max_members
      & info [ "max-members" ] ~docv:"N" ~doc:"Members per client.")
  in
  let hello_timeout =
    Arg.(
      value
      & opt float Server.default.hello_timeout
      & info [ "hello-timeout" ] ~docv:"SECONDS"
          ~doc:"A new connection that has not said HELLO by then is closed.")
  in
  let spin_us =
    Arg.(
      value & opt int Server.default.spin_us
      & info [ "spin-us" ] ~docv:"MICROSECONDS"
          ~doc:
            "Before it sleeps, the daemon polls its sockets this long (0: it sleeps at once). What \
             comes within it is served without waking a sleeping process (tens of microseconds on \
             an idle virtual CPU), at the price of that much CPU each time the daemon goes idle.")
  in
  let spin_yield =
    Arg.(
      value & flag
      & info [ "spin-yield" ]
          ~doc:
            "While it polls (--spin-us), the daemon yields the CPU between two polls. For clients \
             that poll too (CONSORT_CLIENT_SPIN_US) on the daemon's CPU: without it they get the \
             CPU only when the daemon's polling ends. Clients that sleep are better served without \
             it.")
  in
  let ops =
    let control =
      Arg.(
        value
        & opt (some string) None
        & info [ "control" ] ~docv:"PATH"
            ~doc:
              "Answer $(b,consort status), $(b,consort counters), $(b,consort cast) and \
               $(b,consort send) on this Unix socket (mode 0600), for every member the daemon \
               holds.")
    in
    let metrics =
      Arg.(
        value
        & opt (some string) None
        & info [ "metrics" ] ~docv:"ADDR:PORT"
            ~doc:
              "Serve the daemon's and its members' counters in the Prometheus text format at \
               http://$(docv)/metrics.")
    in
    let pcap =
      Arg.(
        value
        & opt (some string) None
        & info [ "pcap" ] ~docv:"FILE"
            ~doc:
              "Record every datagram the members send and receive in $(docv) (pcap, for tcpdump -r \
               or Wireshark; created, mode 0600, never overwritten; at most 1 GiB).")
    in
    let metrics_public =
      Arg.(
        value & flag
        & info [ "metrics-public" ]
            ~doc:
              "Allow $(b,--metrics) on an address other than loopback (0.0.0.0, a public \
               interface): the metrics name every group and member, which Privacy hides on the \
               wire. Without it such an address is refused.")
    in
    Term.(const (fun c m mp p -> (c, m, mp, p)) $ control $ metrics $ metrics_public $ pcap)
  in
  let http =
    let http =
      Arg.(
        value
        & opt (some string) None
        & info [ "http" ] ~docv:"ADDR:PORT"
            ~doc:
              "Serve a live web console at http://$(docv)/ (read-only: every group the daemon \
               holds a member of, the view and its members, the last views and why each changed, \
               flow control, rates and counters), its data as JSON at /api/status (loopback unless \
               $(b,--http-public)).")
    in
    let http_public =
      Arg.(
        value & flag
        & info [ "http-public" ]
            ~doc:
              "Allow $(b,--http) on an address other than loopback: the console names every group \
               and member, which Privacy hides on the wire. Without it such an address is refused.")
    in
    Term.(const (fun h p -> (h, p)) $ http $ http_public)
  in
  let verbose =
    Arg.(
      value & flag
      & info [ "verbose"; "v" ] ~doc:"Log clients failed out and view changes on standard error.")
  in
  let man =
    [
      `S Manpage.s_description;
      `P
        "One daemon per machine holds the process-group stacks of its local clients (C, Python, \
         OCaml: see clients/), who connect to $(b,--socket) and speak the protocol of \
         doc/protocol.md. A client that closes its connection, dies, sends what does not decode, \
         or stops reading is failed out of its groups (its members leave); the others are not \
         disturbed. SIGTERM or SIGINT: every member leaves, then the daemon exits.";
      `P
        "Who may connect: on $(b,--socket), root, the daemon's own user, the users of \
         $(b,--allow-uid) and the members of the groups of $(b,--allow-gid) (default: the daemon's \
         group), by the credentials the kernel gives for each connection (SO_PEERCRED); over \
         $(b,--tcp), with $(b,--token), a client that presents the token in HELLO. The others get \
         ERROR $(b,not-allowed) and the end of the connection (doc/protocol.md, \"Who may \
         connect\").";
      `P
        "Log lines (warnings; with $(b,--verbose), also clients failed out) go to standard error, \
         at most 50 a second; what is dropped is counted in one record of source consortd. With \
         $(b,--log-format json), a record written for a member the daemon holds carries its \
         $(b,member), $(b,group) and $(b,view) fields, as $(b,consort member)'s do; the daemon's \
         own records carry none.";
      `P
        "On SIGUSR1 the daemon prints one line on standard error: $(b,counters) clients=N \
         members=N and its counters (clients accepted, frames and bytes in and out, clients failed \
         out by reason: closed (a clean close), failed_closed (inside a frame), failed_malformed, \
         failed_overloaded, ...).";
      `P
        "Errors are one line on standard error. Exit codes: 0 after SIGTERM or SIGINT (every \
         member left); 2 for a bad argument, an address in use, a key or token file that cannot be \
         read or that others may read, $(b,--tcp) with $(b,--key) and no $(b,--token), or \
         $(b,--metrics) off loopback without $(b,--metrics-public); 124 for an option the command \
         line parser refuses; 125 for an internal error.";
      `S Manpage.s_examples;
      `Pre
        "consortd --socket /run/consort/consortd.sock --bind 10.0.0.1:7500 --peers \
         10.0.0.2:7500-7531\n\
         consortd --socket /tmp/c1.sock --bind 127.0.0.1:7500 --peers 127.0.0.1:7600-7631\n\
         consortd --socket /tmp/c1.sock --control /tmp/c1.ctl --metrics 127.0.0.1:9101 --pcap \
         /tmp/c1.pcap\n\
         consort status --control /tmp/c1.ctl";
    ]
  in
  Cmd.v
    (Cmd.info "consortd" ~version:"0.1.0" ~exits:Consort_cli.exits
       ~doc:"the Consort daemon: process groups for local clients" ~man)
    Term.(
      const main $ socket $ auth $ tcp $ bind $ ports $ peers $ key $ max_frame $ max_queue
      $ max_queued $ max_clients $ max_members $ hello_timeout $ spin_us $ spin_yield $ ops $ http
      $ (const (fun l v -> (l, v)) $ Consort_cli.log_options $ verbose))

let () = Consort_cli.main cmd
