(* A hostile peer: random segments thrown at an established connection.
   The stack must never raise, must only send segments that decode, and
   must release every buffer in the end. *)

open Consort

type seg = {
  flags : int;
  dseq : int;  (** from the stack's RCV.NXT at connection set-up *)
  dack : int;  (** from the stack's ISS *)
  len : int;
  window : int;
  opts : Tcp_packet.option_ list;
  wait : int;  (** milliseconds before the next one *)
}

let gen_seg =
  let open QCheck.Gen in
  let near =
    frequency [ (4, int_range (-3000) 70000); (1, int_range (-0x7FFF_FFFF) 0x7FFF_FFFF) ]
  in
  let opt =
    oneof
      [
        map (fun n -> Tcp_packet.Mss n) (int_bound 0xFFFF);
        map (fun n -> Tcp_packet.Window_scale n) (int_bound 20);
        return Tcp_packet.Sack_permitted;
        map2
          (fun a b -> Tcp_packet.Sack [ (Tcp_seq.of_int a, Tcp_seq.of_int b) ])
          (int_bound 100000) (int_bound 100000);
        map2
          (fun value echo -> Tcp_packet.Timestamp { value; echo })
          (int_bound 5000) (int_bound 5000);
      ]
  in
  map
    (fun ((flags, dseq, dack, len), (window, opts, wait)) ->
      { flags; dseq; dack; len; window; opts; wait })
    (pair
       (quad (int_bound 0x3F) near near (frequency [ (3, return 0); (2, int_range 1 1400) ]))
       (triple (int_bound 0xFFFF) (list_size (int_bound 2) opt) (int_bound 300)))

let pp_seg ppf s =
  Fmt.pf ppf "{flags %a; seq %+d; ack %+d; len %d; win %d; %d opts; wait %d}" Tcp_packet.pp_flags
    (Tcp_packet.flags_of_int s.flags) s.dseq s.dack s.len s.window (List.length s.opts) s.wait

let run_case (timestamps, segs) =
  let vclock = Clock.Virtual.create () in
  let pool = Pool.create ~name:"fuzz" () in
  let net = Mem.create_net ~impairments:{ Mem.perfect with delay = 0 } vclock pool in
  let config = { Tcp.default_config with timestamps; receive_buffer = 64 * 1024 } in
  let (module N) = Node.make ~config net pool 1 ~seed:5 in
  let peer = Mem.attach net 2 in
  let sent = ref [] in
  let bad = ref None in
  let pc =
    Result.get_ok
      (Mem.active_open peer 1 (fun _ ->
           {
             Mem.receive =
               (fun _ p ->
                 (match Tcp_packet.decode (Packet.cstruct p) with
                 | Ok (h, hl) -> sent := (h, Packet.length p - hl) :: !sent
                 | Error e -> bad := Some (Fmt.str "%a" Tcp_packet.pp_error e));
                 Packet.release p);
             status = (fun _ _ -> ());
           }))
  in
  let conn = ref None in
  ignore
    (N.T.passive_open N.tcp { N.T.port = 80; from = None } (fun c ->
         conn := Some c;
         {
           N.T.receive =
             (fun c p ->
               N.T.consume c (Packet.length p);
               Packet.release p);
           status = (fun _ _ -> ());
         }));
  let inject ~seq ~ack ~flags ~window ~options ~len =
    let hdr =
      Tcp_packet.v ~src_port:5000 ~dst_port:80 ~seq ~ack ~flags:(Tcp_packet.flags_of_int flags)
        ~window ~options ()
    in
    let payload = String.make len 'x' in
    let n = Tcp_packet.header_length hdr + len in
    let cs = Tcp_packet.to_cstruct ~pseudo:(Mem.pseudo ~src:2 ~dst:1 ~len:n) hdr ~payload in
    ignore (Mem.send pc (Packet.of_string pool (Cstruct.to_string cs)));
    Clock.Virtual.advance vclock 0
  in
  let irs = Tcp_seq.of_int 1000 in
  let ts = if timestamps then [ Tcp_packet.Timestamp { value = 1; echo = 0 } ] else [] in
  inject ~seq:irs ~ack:Tcp_seq.zero ~flags:Tcp_wire.syn ~window:65535
    ~options:([ Tcp_packet.Mss 1000; Window_scale 2; Sack_permitted ] @ ts)
    ~len:0;
  let iss = match !sent with [ (h, _) ] -> h.seq | _ -> failwith "no SYN-ACK" in
  let rcv = Tcp_seq.succ irs and una = Tcp_seq.succ iss in
  inject ~seq:rcv ~ack:una ~flags:Tcp_wire.ack ~window:1000 ~options:ts ~len:0;
  let c = match !conn with Some c -> c | None -> failwith "not established" in
  ignore (N.T.write c (Cstruct.create 20000));
  List.iter
    (fun s ->
      let options =
        if
          timestamps
          && not (List.exists (function Tcp_packet.Timestamp _ -> true | _ -> false) s.opts)
        then Tcp_packet.Timestamp { value = 2; echo = 0 } :: s.opts
        else s.opts
      in
      let options =
        let rec fit n = function
          | [] -> []
          | o :: r ->
              if n + Tcp_packet.option_length o <= 40 then
                o :: fit (n + Tcp_packet.option_length o) r
              else []
        in
        fit 0 options
      in
      inject ~seq:(Tcp_seq.add rcv s.dseq) ~ack:(Tcp_seq.add una s.dack) ~flags:s.flags
        ~window:s.window ~options ~len:s.len;
      Clock.Virtual.advance vclock (Time.of_ms s.wait))
    segs;
  Clock.Virtual.advance vclock (Time.of_sec 5.);
  (match !conn with Some c -> N.T.abort c | None -> ());
  Clock.Virtual.run_until_idle ~limit:(Time.of_sec 100_000.) vclock;
  (match !bad with Some e -> failwith ("the stack sent a malformed segment: " ^ e) | None -> ());
  (* What it sent: acknowledgements never move back, data stays within the
     20000 bytes written (and the FIN after them). *)
  let last_ack = ref None in
  List.iter
    (fun ((h : Tcp_packet.t), len) ->
      if h.flags.ack && not h.flags.rst then begin
        (match !last_ack with
        | Some a when Tcp_seq.lt h.ack a -> failwith "an acknowledgement moved back"
        | _ -> ());
        last_ack := Some h.ack
      end;
      if len > 0 then begin
        let off = Tcp_seq.sub h.seq una in
        if off < 0 || off + len > 20000 then Fmt.failwith "data outside the stream: %d+%d" off len
      end)
    (List.rev !sent);
  if Pool.in_use pool <> 0 then failwith "buffers left in use";
  true

let prop timestamps seed =
  let name = Fmt.str "random segments on an established connection (timestamps %b)" timestamps in
  let t =
    QCheck.Test.make ~count:300 ~name
      QCheck.(
        make
          ~print:(fun l -> Fmt.str "%a" Fmt.(list ~sep:semi pp_seg) l)
          Gen.(list_size (int_range 1 40) gen_seg))
      (fun segs -> run_case (timestamps, segs))
  in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let tests = [ prop false 21; prop true 22 ]
