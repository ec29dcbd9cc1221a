open Consort

type result = {
  bytes : int;
  virtual_time : Time.t;
  real_time : float;
  retransmitted : int;
  fast_retransmits : int;
  timeouts : int;
  sender : Tcp.conn_info;
  receiver : Tcp.conn_info;
  net : Mem.counts;
}

let pp_result ppf r =
  let rate = float r.bytes /. Time.to_sec (max 1 r.virtual_time) /. 1e6 in
  Fmt.pf ppf "%d bytes in %a virtual (%.1f MB/s), %.2fs real; rexmit %d fast %d rto %d; lost %d"
    r.bytes Time.pp r.virtual_time rate r.real_time r.retransmitted r.fast_retransmits r.timeouts
    r.net.lost

(* Pseudo-random bytes from a xorshift generator, eight at a time. *)
let payload ~seed n =
  let b = Bytes.create (n + 8) in
  let x = ref (Int64.of_int (seed * 0x9E3779B9 lor 1)) in
  let i = ref 0 in
  while !i < n do
    let open Int64 in
    x := logxor !x (shift_left !x 13);
    x := logxor !x (shift_right_logical !x 7);
    x := logxor !x (shift_left !x 17);
    Bytes.set_int64_le b !i !x;
    i := !i + 8
  done;
  Bytes.sub b 0 n

let run ?(config = Tcp.default_config) ?receiver_config ?(checksum = true) ?mtu
    ?(impairments = Mem.perfect) ?(seed = 1) ?(chunk = 65536) ?(read_size = 16384) ?(read_pause = 0)
    ?(limit = Time.of_sec 3600.) ?(prelude = fun _ _ -> ()) n =
  let t0 = Unix.gettimeofday () in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"transfer" () in
  let net = Mem.create_net ~seed ~impairments vclock pool in
  let clock = Mem.clock net in
  let receiver_config = Option.value receiver_config ~default:config in
  let (module A) = Node.make ~config ~checksum ?mtu net pool 1 ~seed:(seed * 3) in
  let (module B) =
    Node.make ~config:receiver_config ~checksum ?mtu net pool 2 ~seed:((seed * 3) + 1)
  in
  let data = payload ~seed n in
  let failure = ref None in
  let fail fmt = Fmt.kstr (fun s -> if !failure = None then failure := Some s) fmt in
  let received = ref 0 and eof_at = ref None and receiver_closed = ref false in
  let sender_info = ref None and receiver_info = ref None in
  let listener =
    match B.Sock.listen B.tcp 80 with Ok l -> l | Error e -> Fmt.failwith "%a" Protocol.pp_error e
  in
  let start = clock.now () in
  Socket.Promise.upon (B.Sock.accept listener) (function
    | Error e -> fail "accept: %a" Protocol.pp_error e
    | Ok s ->
        let buf = Cstruct.create read_size in
        let rec loop () =
          Socket.Promise.upon (B.Sock.read s buf) (function
            | Error e -> fail "read: %a" Protocol.pp_error e
            | Ok 0 ->
                eof_at := Some (clock.now ());
                receiver_info := Some (B.Sock.info s);
                B.Sock.close s;
                Socket.Promise.upon (B.Sock.closed s) (function
                  | Ok () -> receiver_closed := true
                  | Error e -> fail "receiver close: %a" Protocol.pp_error e)
            | Ok k ->
                if !received + k > n then fail "received %d bytes, more than %d" (!received + k) n
                else begin
                  let got = Cstruct.to_string (Cstruct.sub buf 0 k) in
                  if got <> Bytes.sub_string data !received k then begin
                    let i = ref 0 in
                    while got.[!i] = Bytes.get data (!received + !i) do
                      incr i
                    done;
                    fail "byte %d differs" (!received + !i)
                  end;
                  received := !received + k;
                  if read_pause > 0 then
                    ignore (clock.at (clock.now () + read_pause) loop : Clock.cancel)
                  else loop ()
                end)
        in
        loop ());
  prelude net (module B : Node.S);
  let sender_closed = ref false in
  Socket.Promise.upon (A.Sock.connect A.tcp 2 80) (function
    | Error e -> fail "connect: %a" Protocol.pp_error e
    | Ok s ->
        let rec send off =
          if off >= n then begin
            A.Sock.shutdown s;
            Socket.Promise.upon (A.Sock.closed s) (function
              | Ok () -> sender_closed := true
              | Error e -> fail "sender close: %a" Protocol.pp_error e)
          end
          else
            let len = min chunk (n - off) in
            Socket.Promise.upon
              (A.Sock.write s (Cstruct.of_bytes ~off ~len data))
              (function
                | Error e -> fail "write: %a" Protocol.pp_error e | Ok () -> send (off + len))
        in
        send 0;
        let rec watch () =
          let i = A.Sock.info s in
          if i.bytes_sent >= n || !failure <> None then sender_info := Some i
          else ignore (clock.at (clock.now () + Time.of_ms 100) watch : Clock.cancel)
        in
        watch ());
  Clock.Virtual.run_until_idle ~limit vclock;
  (match !failure with Some f -> failwith f | None -> ());
  if !received <> n then Fmt.failwith "received %d of %d bytes" !received n;
  if not !receiver_closed then failwith "receiver did not close";
  if not !sender_closed then failwith "sender did not close";
  let sa = A.T.query A.tcp and sb = B.T.query B.tcp in
  if sa.active <> 0 || sb.active <> 0 then
    Fmt.failwith "connections left: %d and %d" sa.active sb.active;
  if Pool.in_use pool <> 0 then Fmt.failwith "%d segments still in use" (Pool.in_use pool);
  let get = function Some i -> i | None -> failwith "no connection info" in
  let sender = get !sender_info in
  {
    bytes = !received;
    virtual_time = (match !eof_at with Some t -> t - start | None -> 0);
    real_time = Unix.gettimeofday () -. t0;
    retransmitted = sender.segments_retransmitted;
    fast_retransmits = sender.fast_retransmits;
    timeouts = sender.timeouts;
    sender;
    receiver = get !receiver_info;
    net = Mem.counts net;
  }
