open Consort

let peer_isn = 0x1000_0000
let peer_host = 2
let tcp_host = 1

type seqspec = { start : int; stop : int; len : int }
type value = Any | V of int

type opt =
  | O_mss of int
  | O_ws of int
  | O_sackok
  | O_nop
  | O_ts of value * value
  | O_sack of (int * int) list

type segment = {
  flags : Tcp_packet.flags;
  sq : seqspec;
  ack : int option;
  win : int option;
  opts : opt list option;  (** [None]: not given or [<...>] *)
}

type event = Inject of segment | Expect of segment | App of string list
type line = { lineno : int; time : Time.t; ev : event; text : string }

let fail_line l fmt =
  Fmt.kstr (fun s -> failwith (Fmt.str "line %d (%s): %s" l.lineno l.text s)) fmt

(* {1 Parsing} *)

let parse_flags s =
  let f = ref Tcp_packet.no_flags in
  String.iter
    (function
      | 'S' -> f := { !f with syn = true }
      | 'F' -> f := { !f with fin = true }
      | 'R' -> f := { !f with rst = true }
      | 'P' -> f := { !f with psh = true }
      | '.' -> f := { !f with ack = true }
      | 'U' -> f := { !f with urg = true }
      | c -> failwith (Fmt.str "bad flag %c" c))
    s;
  !f

let parse_seq s = Scanf.sscanf s "%d:%d(%d)%!" (fun start stop len -> { start; stop; len })
let value s = if s = "*" then Any else V (int_of_string s)

let parse_opts s =
  let s = String.trim s in
  if s = "..." then None
  else
    let items = List.map String.trim (String.split_on_char ',' s) in
    Some
      (List.filter_map
         (fun it ->
           match String.split_on_char ' ' it |> List.filter (( <> ) "") with
           | [] -> None
           | [ "mss"; n ] -> Some (O_mss (int_of_string n))
           | [ "wscale"; n ] -> Some (O_ws (int_of_string n))
           | [ "sackOK" ] -> Some O_sackok
           | [ "nop" ] -> Some O_nop
           | [ "TS"; "val"; v; "ecr"; e ] -> Some (O_ts (value v, value e))
           | "sack" :: blocks ->
               Some
                 (O_sack (List.map (fun b -> Scanf.sscanf b "%d:%d%!" (fun l r -> (l, r))) blocks))
           | _ -> failwith ("bad option " ^ it))
         items)

let parse_segment words opts =
  match words with
  | flags :: sq :: rest ->
      let rec go ack win = function
        | "ack" :: n :: r -> go (Some (int_of_string n)) win r
        | "win" :: n :: r -> go ack (Some (int_of_string n)) r
        | [] -> (ack, win)
        | w :: _ -> failwith ("unexpected " ^ w)
      in
      let ack, win = go None None rest in
      { flags = parse_flags flags; sq = parse_seq sq; ack; win; opts }
  | _ -> failwith "bad segment"

let parse script =
  let lines = String.split_on_char '\n' script in
  let prev = ref 0 in
  List.concat
    (List.mapi
       (fun i raw ->
         let text = String.trim raw in
         let text =
           match String.index_opt text '#' with
           | Some j -> String.trim (String.sub text 0 j)
           | None -> text
         in
         if text = "" then []
         else
           try
             let time_s, rest =
               match String.index_opt text ' ' with
               | Some j ->
                   (String.sub text 0 j, String.trim (String.sub text j (String.length text - j)))
               | None -> failwith "no event"
             in
             let secs s = Time.of_sec (float_of_string s) in
             let time =
               if time_s.[0] = '+' then
                 !prev + secs (String.sub time_s 1 (String.length time_s - 1))
               else secs time_s
             in
             prev := time;
             let body, opts =
               match
                 if rest.[0] = '<' || rest.[0] = '>' then String.index_from_opt rest 1 '<' else None
               with
               | Some j ->
                   let k = String.rindex rest '>' in
                   if k <= j then (rest, None)
                   else (String.sub rest 0 j, parse_opts (String.sub rest (j + 1) (k - j - 1)))
               | _ -> (rest, None)
             in
             let words = String.split_on_char ' ' body |> List.filter (( <> ) "") in
             let ev =
               match words with
               | "<" :: w -> Inject (parse_segment w opts)
               | ">" :: w -> Expect (parse_segment w opts)
               | w -> App w
             in
             [ { lineno = i + 1; time; ev; text } ]
           with Failure m | Scanf.Scan_failure m ->
             failwith (Fmt.str "line %d (%s): %s" (i + 1) text m))
       lines)

(* {1 Running} *)

let run
    ?(config = { Tcp.default_config with sack = false; timestamps = false; window_scale = false })
    ?(tol = 0) ?(checksum = true) script =
  let lines = parse script in
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"script" () in
  let net = Mem.create_net ~impairments:{ Mem.perfect with delay = 0 } vclock pool in
  let clock = Mem.clock net in
  let (module N) = Node.make ~config ~checksum net pool tcp_host ~seed:7 in
  let peer = Mem.attach net peer_host in
  let captured : (Time.t * Tcp_packet.t * int) Queue.t = Queue.create () in
  let peer_conn =
    match
      Mem.active_open peer tcp_host (fun _ ->
          {
            Mem.receive =
              (fun _ p ->
                (match Tcp_packet.decode (Packet.cstruct p) with
                | Ok (h, hl) -> Queue.push (clock.now (), h, Packet.length p - hl) captured
                | Error e ->
                    Fmt.failwith "the stack sent a malformed segment: %a" Tcp_packet.pp_error e);
                Packet.release p);
            status = (fun _ _ -> ());
          })
    with
    | Ok c -> c
    | Error _ -> assert false
  in
  let local_isn = ref 0 and tcp_port = ref 8080 and peer_port = ref 5000 in
  let last_tsval = ref 0 in
  let conn = ref None in
  let statuses = ref [] in
  let delivered = ref 0 and autoconsume = ref true in
  let handler c =
    conn := Some c;
    {
      N.T.receive =
        (fun c p ->
          let n = Packet.length p in
          delivered := !delivered + n;
          Packet.release p;
          if !autoconsume then N.T.consume c n);
      status = (fun _ st -> statuses := !statuses @ [ st ]);
    }
  in
  let get_conn l = match !conn with Some c -> c | None -> fail_line l "no connection" in
  let run_to t =
    let now = clock.now () in
    if t > now then Clock.Virtual.advance vclock (t - now) else Clock.Virtual.advance vclock 0
  in
  let check_no_output l =
    match Queue.peek_opt captured with
    | Some (at, h, n) ->
        fail_line l "unexpected segment at %a: %a len %d" Time.pp at Tcp_packet.pp h n
    | None -> ()
  in
  let rel_out_seq s = Tcp_seq.sub s (Tcp_seq.of_int !local_isn) in
  let rel_out_ack s = Tcp_seq.sub s (Tcp_seq.of_int peer_isn) in
  let match_opts l (h : Tcp_packet.t) = function
    | None -> ()
    | Some want ->
        let want = List.filter (fun o -> o <> O_nop) want in
        let got = h.options in
        let ok_val v x = match v with Any -> true | V y -> x land 0xFFFF_FFFF = y in
        let eq o (g : Tcp_packet.option_) =
          match (o, g) with
          | O_mss a, Mss b -> a = b
          | O_ws a, Window_scale b -> a = b
          | O_sackok, Sack_permitted -> true
          | O_ts (v, e), Timestamp { value; echo } -> (
              ok_val v value && match e with Any -> true | V y -> y = echo)
          | O_sack bs, Sack gs ->
              List.length bs = List.length gs
              && List.for_all2 (fun (a, b) (c, d) -> a = rel_out_ack c && b = rel_out_ack d) bs gs
          | _ -> false
        in
        if List.length want <> List.length got || not (List.for_all2 eq want got) then
          fail_line l "options differ: got <%a>" Fmt.(list ~sep:comma Tcp_packet.pp_option) got
  in
  let expect l seg =
    run_to (l.time + tol);
    match Queue.take_opt captured with
    | None -> fail_line l "nothing sent by %a" Time.pp (l.time + tol)
    | Some (at, h, n) ->
        let show () = Fmt.str "%a len %d at %a" Tcp_packet.pp h n Time.pp at in
        if abs (at - l.time) > tol then fail_line l "sent at the wrong time: %s" (show ());
        if h.flags.syn then begin
          local_isn := Tcp_seq.to_int h.seq;
          tcp_port := h.src_port;
          peer_port := h.dst_port
        end;
        (match
           List.find_map
             (function Tcp_packet.Timestamp { value; _ } -> Some value | _ -> None)
             h.options
         with
        | Some v -> last_tsval := v
        | None -> ());
        if h.flags <> seg.flags then fail_line l "flags differ: %s" (show ());
        let s = rel_out_seq h.seq in
        if s <> seg.sq.start || n <> seg.sq.len || seg.sq.stop - seg.sq.start <> seg.sq.len then
          fail_line l "sequence differs: %s (relative seq %d)" (show ()) s;
        (match seg.ack with
        | Some a when rel_out_ack h.ack <> a ->
            fail_line l "ack differs: %s (relative ack %d)" (show ()) (rel_out_ack h.ack)
        | _ -> ());
        (match seg.win with
        | Some w when h.window <> w -> fail_line l "window differs: %s" (show ())
        | _ -> ());
        match_opts l h seg.opts
  in
  let inject l seg =
    run_to l.time;
    check_no_output l;
    let opts =
      match seg.opts with
      | None -> []
      | Some os ->
          List.filter_map
            (function
              | O_mss n -> Some (Tcp_packet.Mss n)
              | O_ws n -> Some (Tcp_packet.Window_scale n)
              | O_sackok -> Some Tcp_packet.Sack_permitted
              | O_nop -> None
              | O_ts (v, e) ->
                  let g = function V x -> x | Any -> !last_tsval in
                  Some
                    (Tcp_packet.Timestamp
                       { value = g v; echo = (match e with V x -> x | Any -> !last_tsval) })
              | O_sack bs ->
                  Some
                    (Tcp_packet.Sack
                       (List.map
                          (fun (a, b) ->
                            ( Tcp_seq.add (Tcp_seq.of_int !local_isn) a,
                              Tcp_seq.add (Tcp_seq.of_int !local_isn) b ))
                          bs)))
            os
    in
    let hdr =
      Tcp_packet.v ~src_port:!peer_port ~dst_port:!tcp_port
        ~seq:(Tcp_seq.add (Tcp_seq.of_int peer_isn) seg.sq.start)
        ~ack:
          (match seg.ack with
          | Some a -> Tcp_seq.add (Tcp_seq.of_int !local_isn) a
          | None -> Tcp_seq.zero)
        ~flags:seg.flags
        ~window:(Option.value seg.win ~default:65535)
        ~options:opts ()
    in
    let payload = String.init seg.sq.len (fun i -> Char.chr (97 + (i mod 26))) in
    let len = Tcp_packet.header_length hdr + String.length payload in
    let pseudo = if checksum then Some (Mem.pseudo ~src:peer_host ~dst:tcp_host ~len) else None in
    let cs = Tcp_packet.to_cstruct ?pseudo hdr ~payload in
    (match Mem.send peer_conn (Packet.of_string pool (Cstruct.to_string cs)) with
    | Ok () -> ()
    | Error _ -> fail_line l "could not inject");
    Clock.Virtual.advance vclock 0
  in
  let status_name = function
    | Tcp.Connected -> "connected"
    | Writable -> "writable"
    | Peer_closed -> "peer_closed"
    | Closed_normally -> "closed"
    | Failed `Reset -> "reset"
    | Failed (`Refused _) -> "refused"
    | Failed `Timeout -> "timeout"
    | Failed e -> Fmt.str "%a" Protocol.pp_error e
  in
  let app l words =
    run_to l.time;
    check_no_output l;
    match words with
    | [ "listen"; p ] -> (
        tcp_port := int_of_string p;
        match N.T.passive_open N.tcp { N.T.port = !tcp_port; from = None } handler with
        | Ok () -> ()
        | Error e -> fail_line l "%a" Protocol.pp_error e)
    | [ "connect"; p ] -> (
        peer_port := int_of_string p;
        match
          N.T.active_open N.tcp
            { N.T.host = peer_host; port = !peer_port; local_port = None }
            handler
        with
        | Ok c -> conn := Some c
        | Error e -> fail_line l "%a" Protocol.pp_error e)
    | [ "write"; n ] ->
        let n = int_of_string n in
        let k = N.T.write (get_conn l) (Cstruct.create n) in
        if k <> n then fail_line l "wrote %d of %d bytes" k n
    | [ "read"; n ] ->
        let n = int_of_string n in
        if !delivered < n then fail_line l "only %d bytes delivered" !delivered;
        delivered := !delivered - n;
        N.T.consume (get_conn l) n
    | [ "close" ] -> N.T.close (get_conn l)
    | [ "shutdown" ] -> N.T.shutdown (get_conn l)
    | [ "abort" ] -> N.T.abort (get_conn l)
    | [ "nodelay" ] -> N.T.set_nodelay (get_conn l) true
    | [ "autoconsume"; v ] -> autoconsume := v = "on"
    | [ "expect"; "state"; s ] ->
        let got = Fmt.str "%a" Tcp.pp_state (N.T.state (get_conn l)) in
        if got <> s then fail_line l "state is %s" got
    | [ "expect"; "status"; s ] -> (
        match List.partition (fun st -> status_name st = s) !statuses with
        | _ :: _, rest -> statuses := rest
        | [], _ ->
            fail_line l "no %s status (got: %s)" s
              (String.concat ", " (List.map status_name !statuses)))
    | [ "expect"; "delivered"; n ] ->
        if !delivered <> int_of_string n then fail_line l "delivered %d bytes" !delivered
    | [ "expect"; "mss"; n ] ->
        let i = N.T.info (get_conn l) in
        if i.snd_mss <> int_of_string n then fail_line l "mss is %d" i.snd_mss
    | [ "expect"; "wscale"; a; b ] ->
        let i = N.T.info (get_conn l) in
        let o = function None -> "none" | Some n -> string_of_int n in
        if o i.snd_wscale <> a || o i.rcv_wscale <> b then
          fail_line l "wscale is %s %s" (o i.snd_wscale) (o i.rcv_wscale)
    | [ "expect"; "snd_wnd"; n ] ->
        let i = N.T.info (get_conn l) in
        if i.snd_wnd <> int_of_string n then fail_line l "snd_wnd is %d" i.snd_wnd
    | [ "expect"; "cwnd"; n ] ->
        let i = N.T.info (get_conn l) in
        if i.cwnd <> int_of_string n then fail_line l "cwnd is %d" i.cwnd
    | [ "expect"; "ssthresh"; n ] ->
        let i = N.T.info (get_conn l) in
        if i.ssthresh <> int_of_string n then fail_line l "ssthresh is %d" i.ssthresh
    | [ "expect"; "rto"; ms ] ->
        let i = N.T.info (get_conn l) in
        if i.rto <> Time.of_ms (int_of_string ms) then fail_line l "rto is %a" Time.pp i.rto
    | _ -> fail_line l "unknown command"
  in
  List.iter
    (fun l -> match l.ev with Inject s -> inject l s | Expect s -> expect l s | App w -> app l w)
    lines;
  (match Queue.peek_opt captured with
  | Some (at, h, n) ->
      Fmt.failwith "unexpected segment at the end, at %a: %a len %d" Time.pp at Tcp_packet.pp h n
  | None -> ());
  ignore pool
