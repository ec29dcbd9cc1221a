open Cmdliner
open Consort_net
module Up = Consort_net_unix.Up
module Loop = Consort_engine.Loop
module Promise = Socket.Promise

let echo_port = 7
let discard_port = 9

(* TCP over the stack's IPv4 or IPv6, with that pseudo-header checksum. *)
module type TCP = sig
  type host

  module T : Tcp.S with type host = host
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
  val pp_host : host Fmt.t
end

let tcp_config ~memory_mb =
  {
    Tcp.default_config with
    send_buffer = 1 lsl 20;
    receive_buffer = 1 lsl 20;
    memory_limit = memory_mb * 1024 * 1024;
  }

let tcp_on ~memory_mb (up : Up.t) : ((module TCP), Protocol.error) result =
  let module P = struct
    type host = Ipv4_addr.t
    type lower_address = Ipv4.address
    type lower_pattern = Ipv4.address_pattern

    let local = Ipstack.Ip.address up.stack.ip
    let lower_address h = { Ipv4.dst = h; proto = 6 }
    let lower_pattern = { Ipv4.protocol = 6; source = None }
    let pseudo_header = Some (fun ~src ~dst ~len -> Checksum.pseudo_ipv4 ~src ~dst ~proto:6 ~len)
    let equal_host = Ipv4_addr.equal
    let pp_host = Ipv4_addr.pp
    let clock = Consort_net_unix.Loop_clock.of_loop up.loop

    let rng =
      Consort.Rng.create (Unix.getpid () * 7919 lxor int_of_float (Unix.gettimeofday () *. 1e6))

    let pool = up.pool
  end in
  let module T = Tcp.Make (Ipv4.Df (Ipstack.Ip)) (P) in
  match T.create ~config:(tcp_config ~memory_mb) ~icmp:Tcp_icmp.of_ipv4 up.stack.ip with
  | Error _ as e -> e
  | Ok tcp ->
      Ok
        (module struct
          type host = Ipv4_addr.t

          module T = T
          module Sock = Socket.Make (T)

          let tcp = tcp
          let pp_host = Ipv4_addr.pp
        end : TCP)

(* The same TCP functor over the stack's IPv6 (with [--ip6]). *)
let tcp_on6 ~memory_mb (up : Up.t) (v6 : Up.ip6) : ((module TCP), Protocol.error) result =
  match Ipstack.Ip6.address v6.ip6 with
  | None -> Error (`Bad_address "no IPv6 address")
  | Some local -> (
      let module P = struct
        type host = Ipv6_addr.t
        type lower_address = Ipv6.address
        type lower_pattern = Ipv6.address_pattern

        let local = local
        let lower_address h = { Ipv6.dst = h; proto = 6 }
        let lower_pattern = { Ipv6.protocol = 6; source = None }

        let pseudo_header =
          Some (fun ~src ~dst ~len -> Transport_checksum.ipv6 ~src ~dst ~proto:6 ~len)

        let equal_host = Ipv6_addr.equal
        let pp_host = Ipv6_addr.pp
        let clock = Consort_net_unix.Loop_clock.of_loop up.loop

        let rng =
          Consort.Rng.create (Unix.getpid () * 7907 lxor int_of_float (Unix.gettimeofday () *. 1e6))

        let pool = up.pool
      end in
      let module T = Tcp.Make (Ipstack.Ip6) (P) in
      match T.create ~config:(tcp_config ~memory_mb) ~icmp:Tcp_icmp.of_ipv6 v6.ip6 with
      | Error _ as e -> e
      | Ok tcp ->
          Ok
            (module struct
              type host = Ipv6_addr.t

              module T = T
              module Sock = Socket.Make (T)

              let tcp = tcp
              let pp_host ppf h = Fmt.pf ppf "[%a]" Ipv6_addr.pp h
            end : TCP))

(* RFC 864's character generator: lines of 72 printable characters, each
   starting one character further along the 95 printable ones, CR LF;
   the pattern repeats every 95 lines. The chunk is a whole number of
   periods, so that chunks follow each other seamlessly. *)
let chargen_chunk =
  let period = 95 * 74 in
  let b = Bytes.create (9 * period) in
  for i = 0 to Bytes.length b - 1 do
    let line = i / 74 and col = i mod 74 in
    Bytes.set b i
      (if col = 72 then '\r' else if col = 73 then '\n' else Char.chr (32 + ((line + col) mod 95)))
  done;
  Cstruct.of_bytes b

let rate bytes secs = if secs <= 0. then 0. else float bytes *. 8. /. secs /. 1e6

let serve (module N : TCP) ~source_port ~source_bytes =
  let peer s =
    let h, p = N.T.remote (N.Sock.connection s) in
    Fmt.str "%a:%d" N.pp_host h p
  in
  let listen port what on_conn =
    match N.Sock.listen N.tcp port with
    | Error e -> Error (`Msg (Fmt.str "TCP port %d (%s): %a" port what Protocol.pp_error e))
    | Ok l ->
        let rec accept () =
          Promise.upon (N.Sock.accept l) (function
            | Ok s ->
                on_conn s;
                accept ()
            | Error e -> Fmt.epr "consort net: TCP %s: accept: %a@." what Protocol.pp_error e)
        in
        accept ();
        Ok ()
  in
  let failed what s e =
    Fmt.pr "tcp %s: %s: %a@." what (peer s) Protocol.pp_error e;
    N.Sock.abort s
  in
  (* Echo: each read is written back before the next read, so a client
     that does not read slows us down instead of filling our memory. *)
  let echo s =
    let buf = Cstruct.create 65536 in
    let rec loop () =
      Promise.upon (N.Sock.read s buf) (function
        | Error e -> failed "echo" s e
        | Ok 0 -> N.Sock.close s
        | Ok n ->
            Promise.upon
              (N.Sock.write s (Cstruct.sub buf 0 n))
              (function Ok () -> loop () | Error e -> failed "echo" s e))
    in
    loop ()
  in
  (* Discard: read to the end, then close; the count and rate of each
     connection are printed (the kernel-to-us throughput test). *)
  let discard s =
    let buf = Cstruct.create 65536 and got = ref 0 and t0 = Unix.gettimeofday () in
    let who = peer s in
    let rec loop () =
      Promise.upon (N.Sock.read s buf) (function
        | Error e -> failed "discard" s e
        | Ok 0 ->
            let dt = Unix.gettimeofday () -. t0 in
            Fmt.pr "tcp discard: received %d bytes from %s in %.3f s (%.1f Mbit/s)@." !got who dt
              (rate !got dt);
            N.Sock.close s
        | Ok n ->
            got := !got + n;
            loop ())
    in
    loop ()
  in
  (* Source: [source_bytes] of chargen lines as fast as TCP takes them,
     then a FIN; the rate counts until the peer has acknowledged all and
     closed too. *)
  let source s =
    let t0 = Unix.gettimeofday () and who = peer s in
    let chunk = Cstruct.length chargen_chunk in
    let rec loop sent =
      if sent >= source_bytes then begin
        N.Sock.close s;
        Promise.upon (N.Sock.closed s) (function
          | Ok () ->
              let dt = Unix.gettimeofday () -. t0 in
              Fmt.pr "tcp source: sent %d bytes to %s in %.3f s (%.1f Mbit/s)@." source_bytes who dt
                (rate source_bytes dt)
          | Error e -> Fmt.pr "tcp source: %s: %a@." who Protocol.pp_error e)
      end
      else
        let n = min chunk (source_bytes - sent) in
        Promise.upon
          (N.Sock.write s (Cstruct.sub chargen_chunk 0 n))
          (function Ok () -> loop (sent + n) | Error e -> failed "source" s e)
    in
    loop 0
  in
  let ( let* ) = Result.bind in
  let* () = listen echo_port "echo" echo in
  let* () = listen discard_port "discard" discard in
  listen source_port "source" source

let up tap ip ip6 gateway mtu seconds source_port source_mb memory_mb =
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Warning);
  let timeout = Option.map Consort.Time.of_sec seconds in
  let tcp = ref [] and problem = ref None in
  (* A service that cannot start stops the loop as soon as it runs. *)
  let setup (up : Up.t) =
    let give_up e =
      problem := Some e;
      ignore (Loop.after up.loop 0 (fun () -> Loop.stop up.loop) : Loop.timer)
    in
    let start name make =
      match make () with
      | Error e -> give_up (Fmt.str "%s: %a" name Protocol.pp_error e)
      | Ok m -> (
          tcp := !tcp @ [ (name, m) ];
          match serve m ~source_port ~source_bytes:(source_mb * 1_000_000) with
          | Ok () -> ()
          | Error (`Msg e) -> give_up (Fmt.str "%s: %s" name e))
    in
    start "TCP" (fun () -> tcp_on ~memory_mb up);
    Option.iter
      (fun v6 -> if !problem = None then start "TCP over IPv6" (fun () -> tcp_on6 ~memory_mb up v6))
      up.v6
  in
  let fail e =
    Fmt.epr "consort net up: %s@." e;
    Consort_cli.refused
  in
  if
    source_port <= 0 || source_port > 0xffff || source_port = echo_port
    || source_port = discard_port
  then fail (Printf.sprintf "--source-port %d: a port other than 7 and 9 is needed" source_port)
  else if source_mb < 0 then fail "--source-mb must not be negative"
  else if memory_mb > 1 lsl 20 then
    fail (Printf.sprintf "--memory %d: at most %d MiB" memory_mb (1 lsl 20))
  else
    match
      Up.run ?ip6 ?gateway ?mtu ?timeout ~udp_echo:[ echo_port ] ~udp_discard:[ discard_port ]
        ~setup ~stats_every:10. ~tap ~ip ()
    with
    | Error (`Msg e) -> fail e
    | Ok () -> (
        match !problem with
        | Some e -> fail e
        | None ->
            List.iter
              (fun (name, (module N : TCP)) ->
                Fmt.pr "%s: %a@."
                  (if name = "TCP" then "tcp" else "tcp6")
                  Tcp.pp_stats (N.T.query N.tcp))
              !tcp;
            0)

let up_cmd =
  let tap =
    Arg.(
      required
      & opt (some string) None
      & info [ "tap" ] ~docv:"NAME" ~doc:"TAP device to create or attach to.")
  in
  let ip =
    Arg.(
      required
      & opt (some string) None
      & info [ "ip" ] ~docv:"ADDR/LEN" ~doc:"This stack's IPv4 address and prefix length.")
  in
  let ip6 =
    Arg.(
      value
      & opt (some string) None
      & info [ "ip6" ] ~docv:"ADDR/LEN"
          ~doc:
            "Also run IPv6 with this address and prefix length (beside the link-local address made \
             from the MAC): neighbour discovery, ping6, and the same UDP and TCP services over \
             IPv6.")
  in
  let gateway =
    Arg.(value & opt (some string) None & info [ "gateway" ] ~docv:"ADDR" ~doc:"Default gateway.")
  in
  let mtu =
    Arg.(
      value
      & opt (some Consort_cli.positive_int) None
      & info [ "mtu" ] ~docv:"BYTES" ~doc:"Link MTU (default 1500).")
  in
  let seconds =
    Arg.(
      value
      & opt (some Consort_cli.positive_float) None
      & info [ "for" ] ~docv:"SECONDS" ~doc:"Stop after this long.")
  in
  let source_port =
    Arg.(
      value & opt int 19
      & info [ "source-port" ] ~docv:"PORT"
          ~doc:"The TCP port of the throughput source (19 is the character generator's).")
  in
  let source_mb =
    Arg.(
      value & opt int 100
      & info [ "source-mb" ] ~docv:"N"
          ~doc:"Megabytes (millions of bytes) the throughput source sends on each connection.")
  in
  let memory_mb =
    Arg.(
      value & opt Consort_cli.positive_int 128
      & info [ "memory" ] ~docv:"MIB"
          ~doc:
            "The TCP memory budget in MiB (default 128), for IPv4 and IPv6 each: send buffers (1 \
             MiB each, taken at a connection's first write; an equal share of at least 16 KiB when \
             the connections could not all hold one) and received data held, across connections. \
             When it is spent, the oldest connections holding a send buffer behind a zero window \
             are reset, receive windows shrink to an equal share, and segments for connections \
             already holding data are dropped.")
  in
  let man =
    [
      `S Manpage.s_description;
      `P
        "Runs Consort's TCP/IP stack on a TAP device until SIGINT or SIGTERM (or $(b,--for)): it \
         answers ARP and ping, and serves the standard small services over UDP and TCP: echo on \
         port 7, discard on port 9. The stack's counters are printed every 10 seconds and at the \
         end.";
      `P
        "Throughput test, one direction per port. Towards the kernel: every connection accepted on \
         the source port ($(b,--source-port), default 19) is sent $(b,--source-mb) megabytes \
         (default 100) of RFC 864 character-generator lines (72 printable characters, each line \
         starting one character further along, CR LF) as fast as TCP takes them, then a FIN; once \
         the peer has closed too, a line $(i,tcp source: sent N bytes to ADDR:PORT in S s (R \
         Mbit/s)) is printed. From the kernel: TCP discard prints $(i,tcp discard: received N \
         bytes from ADDR:PORT in S s (R Mbit/s)) for each connection when the peer closes it.";
      `P
        "For example, from the kernel side: $(b,nc ADDR 19 | pv >/dev/null) and $(b,pv /dev/zero | \
         nc -N ADDR 9).";
    ]
  in
  Cmd.v
    (Consort_cli.info ~path:"net up" "up" ~man
       ~doc:
         "Run the stack on a TAP device: ping, UDP and TCP echo (port 7) and discard (port 9), a \
          TCP throughput source.")
    Term.(const up $ tap $ ip $ ip6 $ gateway $ mtu $ seconds $ source_port $ source_mb $ memory_mb)

let cmd =
  Cmd.group
    (Cmd.info "net" ~exits:Consort_cli.exits ~doc:"Consort's user-space TCP/IP stack.")
    [ up_cmd ]
