let src = Logs.Src.create "consort.icmp" ~doc:"ICMP"

module Log = (val Logs.src_log src : Logs.LOG)

(* The types of [Protocol.S], included again in [Make]. *)
module Types = struct
  type address = { dst : Ipv4_addr.t; id : int }
  type address_pattern = |
  type status = Echo_reply of { seq : int; rtt : Consort.Time.t } | Icmp_error of Icmp_packet.t
  type control = Replies of bool

  type info = {
    echo_requests_in : int;
    echo_replies_out : int;
    echo_requests_out : int;
    echo_replies_in : int;
    errors_in : int;
    bad : int;
    unmatched : int;
  }
end

include Types

let pp_info ppf i =
  Fmt.pf ppf "echo requests %d in %d out, replies %d out %d in; %d errors in, %d bad, %d unmatched"
    i.echo_requests_in i.echo_requests_out i.echo_replies_out i.echo_replies_in i.errors_in i.bad
    i.unmatched

module type S = sig
  include Protocol.S_WITH with module T := Types

  type ip

  val create : clock:Clock.t -> ip -> t
end

module Make (Ip : Ipv4.S) = struct
  include Types

  type ip = Ip.t

  type t = {
    ip : Ip.t;
    clock_now : unit -> Consort.Time.t;
    sessions : connection Itbl.t; (* (dst lsl 16) lor id *)
    mutable replies : bool;
    mutable echo_requests_in : int;
    mutable echo_replies_out : int;
    mutable echo_requests_out : int;
    mutable echo_replies_in : int;
    mutable errors_in : int;
    mutable bad : int;
    mutable unmatched : int;
  }

  and connection = {
    icmp : t;
    ipc : Ip.connection;
    dst : Ipv4_addr.t;
    id : int;
    mutable seq : int;
    sent_at : Consort.Time.t array; (* by seq land 255 *)
    mutable handler : handler;
    mutable open_ : bool;
  }

  and handler = { receive : connection -> Packet.t -> unit; status : connection -> status -> unit }

  let skey dst id = ((dst : Ipv4_addr.t :> int) lsl 16) lor id

  let reply_in_place t ipc p =
    (* Echo request (8, 0) becomes echo reply (0, 0): one word changes. *)
    let cs = Packet.cstruct p in
    Icmp_wire.set_ty cs Icmp_wire.echo_reply;
    Icmp_wire.set_checksum cs
      (Checksum.adjust ~checksum:(Icmp_wire.get_checksum cs) ~old_word:0x0800 ~new_word:0x0000);
    t.echo_replies_out <- t.echo_replies_out + 1;
    ignore (Ip.send ipc p)

  let input t ipc p =
    let cs = Packet.cstruct p in
    if Cstruct.length cs < Icmp_wire.sizeof_icmp || not (Checksum.valid cs) then (
      t.bad <- t.bad + 1;
      Packet.release p)
    else
      let ty = Icmp_wire.get_ty cs and code = Icmp_wire.get_code cs in
      if ty = Icmp_wire.echo_request && code = 0 then (
        t.echo_requests_in <- t.echo_requests_in + 1;
        if t.replies then reply_in_place t ipc p else Packet.release p)
      else if ty = Icmp_wire.echo_reply && code = 0 then (
        t.echo_replies_in <- t.echo_replies_in + 1;
        let id = Icmp_wire.get_id cs and seq = Icmp_wire.get_seq cs in
        match Itbl.find_opt t.sessions (skey (Ip.remote ipc) id) with
        | Some c when c.open_ ->
            let rtt = t.clock_now () - c.sent_at.(seq land 255) in
            c.handler.status c (Echo_reply { seq; rtt });
            let (_ : (unit, _) result) = Packet.pull p Icmp_wire.sizeof_icmp in
            c.handler.receive c p
        | _ ->
            t.unmatched <- t.unmatched + 1;
            Packet.release p)
      else if ty = Icmp_wire.dest_unreachable || ty = Icmp_wire.time_exceeded then (
        t.errors_in <- t.errors_in + 1;
        (match Icmp_packet.decode cs with
        | Ok (err, quoted) ->
            Log.debug (fun m -> m "from %a: %a" Ipv4_addr.pp (Ip.remote ipc) Icmp_packet.pp err);
            Ip.deliver_icmp_error t.ip err quoted
        | Error _ -> t.bad <- t.bad + 1);
        Packet.release p)
      else (
        t.unmatched <- t.unmatched + 1;
        Packet.release p)

  (* Errors about our own echo requests come back on our IP connection. *)
  let ip_status t _ipc (s : Ipv4.status) =
    match s with
    | Icmp_error { error; quoted } ->
        if String.length quoted >= 8 && Char.code quoted.[0] = Icmp_wire.echo_request then
          let id = (Char.code quoted.[4] lsl 8) lor Char.code quoted.[5] in
          Itbl.iter
            (fun _ c -> if c.id = id && c.open_ then c.handler.status c (Icmp_error error))
            t.sessions

  let ip_handler t _ = { Ip.receive = input t; status = ip_status t }

  let create ~clock ip =
    let t =
      {
        ip;
        clock_now = clock.Clock.now;
        sessions = Itbl.create 8;
        replies = true;
        echo_requests_in = 0;
        echo_replies_out = 0;
        echo_requests_out = 0;
        echo_replies_in = 0;
        errors_in = 0;
        bad = 0;
        unmatched = 0;
      }
    in
    Protocol.opened "Icmp.create"
      (Ip.passive_open ip { protocol = Ipv4_wire.proto_icmp; source = None } (ip_handler t));
    t

  let nothing = { receive = (fun _ p -> Packet.release p); status = (fun _ _ -> ()) }

  let active_open t ({ dst; id } : address) f =
    let k = skey dst (id land 0xffff) in
    if Itbl.mem t.sessions k then Error (`In_use (Printf.sprintf "echo id %d" id))
    else
      match Ip.active_open t.ip { dst; proto = Ipv4_wire.proto_icmp } (ip_handler t) with
      | Error _ as e -> e
      | Ok ipc ->
          let c =
            {
              icmp = t;
              ipc;
              dst;
              id = id land 0xffff;
              seq = 0;
              sent_at = Array.make 256 0;
              handler = nothing;
              open_ = true;
            }
          in
          Itbl.replace t.sessions k c;
          c.handler <- f c;
          Ok c

  let passive_open _ (p : address_pattern) _ = match p with _ -> .

  let send c p =
    if not c.open_ then (
      Packet.release p;
      Error `Closed)
    else
      let t = c.icmp in
      let (_ : Cstruct.t) = Packet.push p Icmp_wire.sizeof_icmp in
      let seq = c.seq in
      c.seq <- (seq + 1) land 0xffff;
      Icmp_packet.encode (Echo_request { id = c.id; seq }) (Packet.cstruct p);
      c.sent_at.(seq land 255) <- t.clock_now ();
      t.echo_requests_out <- t.echo_requests_out + 1;
      Ip.send c.ipc p

  let close c =
    if c.open_ then (
      c.open_ <- false;
      Itbl.remove c.icmp.sessions (skey c.dst c.id);
      Ip.close c.ipc)

  let abort = close
  let max_packet c = Ip.max_packet c.ipc - Icmp_wire.sizeof_icmp
  let headroom t = Icmp_wire.sizeof_icmp + Ip.headroom t.ip

  let control t (Replies b) =
    t.replies <- b;
    Ok ()

  let query t =
    {
      echo_requests_in = t.echo_requests_in;
      echo_replies_out = t.echo_replies_out;
      echo_requests_out = t.echo_requests_out;
      echo_replies_in = t.echo_replies_in;
      errors_in = t.errors_in;
      bad = t.bad;
      unmatched = t.unmatched;
    }
end
