open Consort

let src = Logs.Src.create "consort.capture" ~doc:"pcap capture of datagrams"

module Log = (val Logs.src_log src : Logs.LOG)

type writer = {
  oc : out_channel;
  limit : int;
  mutable written : int;
  mutable records : int;
  mutable stopped : bool;
  mutable closed : bool;
  mutable error : string option; (* the write that failed *)
}

let header =
  let b = Bytes.create 24 in
  Bytes.set_int32_le b 0 0xa1b2c3d4l;
  Bytes.set_uint16_le b 4 2;
  Bytes.set_uint16_le b 6 4;
  Bytes.set_int32_le b 8 0l;
  Bytes.set_int32_le b 12 0l;
  Bytes.set_int32_le b 16 65535l;
  Bytes.set_int32_le b 20 101l (* LINKTYPE_RAW *);
  Bytes.to_string b

let create ?(limit = 1 lsl 30) path =
  match open_out_gen [ Open_wronly; Open_creat; Open_excl; Open_binary ] 0o600 path with
  | oc -> (
      match
        output_string oc header;
        flush oc
      with
      | () ->
          Ok { oc; limit; written = 24; records = 0; stopped = false; closed = false; error = None }
      | exception Sys_error e ->
          close_out_noerr oc;
          (try Sys.remove path with Sys_error _ -> ());
          Error e)
  | exception Sys_error e -> Error e

let records w = w.records
let error w = w.error

let close w =
  if not w.closed then (
    w.closed <- true;
    try close_out w.oc
    with Sys_error e ->
      close_out_noerr w.oc;
      if w.error = None then w.error <- Some e)

(* A write failed (a full disk, an I/O error): recording stops for good,
   and [error] says why (the owner stops). *)
let failed w e =
  if w.error = None then w.error <- Some e;
  if not w.stopped then (
    w.stopped <- true;
    Log.info (fun m -> m "pcap capture failed after %d datagrams: %s" w.records e))

let stop w why =
  if not w.stopped then (
    w.stopped <- true;
    Log.warn (fun m -> m "pcap capture stopped after %d datagrams: %s" w.records why);
    try flush w.oc with Sys_error _ -> ())

(* "a.b.c.d:port" as 4 address bytes and a port. *)
let ipv4_port s =
  match String.rindex_opt s ':' with
  | None -> None
  | Some i -> (
      match
        ( String.split_on_char '.' (String.sub s 0 i),
          int_of_string_opt (String.sub s (i + 1) (String.length s - i - 1)) )
      with
      | [ a; b; c; d ], Some port when port >= 0 && port < 65536 -> (
          match List.map int_of_string_opt [ a; b; c; d ] with
          | [ Some a; Some b; Some c; Some d ]
            when List.for_all (fun x -> x >= 0 && x < 256) [ a; b; c; d ] ->
              Some ((a lsl 24) lor (b lsl 16) lor (c lsl 8) lor d, port)
          | _ -> None)
      | _ -> None)

let ip_checksum b =
  let sum = ref 0 in
  for i = 0 to 9 do
    sum := !sum + Bytes.get_uint16_be b (2 * i)
  done;
  while !sum > 0xffff do
    sum := (!sum land 0xffff) + (!sum lsr 16)
  done;
  lnot !sum land 0xffff

let record w ~src ~dst pieces =
  if not (w.stopped || w.closed) then
    match (ipv4_port src, ipv4_port dst) with
    | Some (sa, sp), Some (da, dp) ->
        let len = List.fold_left (fun n c -> n + Cstruct.length c) 0 pieces in
        let total = 28 + len in
        if w.written + 16 + total > w.limit then
          stop w (Printf.sprintf "the file reached its limit of %d bytes" w.limit)
        else begin
          let t = Unix.gettimeofday () in
          let h = Bytes.make (16 + 28) '\000' in
          Bytes.set_int32_le h 0 (Int32.of_float t);
          Bytes.set_int32_le h 4 (Int32.of_float ((t -. Float.of_int (int_of_float t)) *. 1e6));
          Bytes.set_int32_le h 8 (Int32.of_int (min total 65535));
          Bytes.set_int32_le h 12 (Int32.of_int total);
          let ip = Bytes.make 20 '\000' in
          Bytes.set_uint8 ip 0 0x45;
          Bytes.set_uint16_be ip 2 (min total 65535);
          Bytes.set_uint8 ip 8 64;
          Bytes.set_uint8 ip 9 17;
          Bytes.set_int32_be ip 12 (Int32.of_int sa);
          Bytes.set_int32_be ip 16 (Int32.of_int da);
          Bytes.set_uint16_be ip 10 (ip_checksum ip);
          Bytes.blit ip 0 h 16 20;
          Bytes.set_uint16_be h 36 sp;
          Bytes.set_uint16_be h 38 dp;
          Bytes.set_uint16_be h 40 (min (8 + len) 65535);
          (* UDP checksum 0: not computed. *)
          let captured = min total 65535 - 28 in
          match
            output_bytes w.oc h;
            let left = ref captured in
            List.iter
              (fun c ->
                let n = min !left (Cstruct.length c) in
                if n > 0 then output_string w.oc (Cstruct.to_string ~off:0 ~len:n c);
                left := !left - n)
              pieces;
            (* Each record reaches the file at once: a member killed
               with SIGKILL leaves a capture that ends at its last datagram. *)
            flush w.oc
          with
          | () ->
              w.written <- w.written + 16 + 28 + captured;
              w.records <- w.records + 1
          | exception Sys_error e -> failed w e
        end
    | _ -> ()

module Make (T : Transport.S) = struct
  type address = T.address

  let pp_address = T.pp_address
  let equal_address = T.equal_address
  let address_to_string = T.address_to_string
  let address_of_string = T.address_of_string

  type t = { inner : T.t; writer : writer option }

  let wrap inner writer = { inner; writer }

  type connection = { c : T.connection; w : writer option; me : string }
  type handler = T.handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

  type nonrec control = T.control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
    | Join_multicast of address

  type info = T.info = {
    local : address;
    mtu : int;
    multicast : bool;
    sent : int;
    received : int;
    dropped : int;
  }

  type timer = T.timer

  let now t = T.now t.inner
  let at t = T.at t.inner
  let cancel = T.cancel

  let open_ t addr mk =
    match t.writer with
    | None ->
        Result.map
          (fun c -> { c; w = None; me = T.address_to_string addr })
          (T.open_ t.inner addr (fun c -> mk { c; w = None; me = "" }))
    | Some w ->
        let local = ref (T.address_to_string addr) in
        let r =
          T.open_ t.inner addr (fun c ->
              let me = { c; w = Some w; me = !local } in
              let h = mk me in
              {
                recv =
                  (fun ~src iov ->
                    record w ~src:(T.address_to_string src) ~dst:!local [ Iovec.cstruct iov ];
                    h.recv ~src iov);
                closed = h.closed;
              })
        in
        Result.map
          (fun c ->
            (* The address really bound (port 0 picks one). *)
            local := T.address_to_string (T.query c).T.local;
            { c; w = Some w; me = !local })
          r

  let pieces msg = [ Cstruct.of_string (Msg.to_string msg) ]

  let send c ~dst msg =
    Option.iter (fun w -> record w ~src:c.me ~dst:(T.address_to_string dst) (pieces msg)) c.w;
    T.send c.c ~dst msg

  let cast c ~dsts msg =
    Option.iter
      (fun w ->
        let p = pieces msg in
        List.iter (fun d -> record w ~src:c.me ~dst:(T.address_to_string d) p) dsts)
      c.w;
    T.cast c.c ~dsts msg

  let close c = T.close c.c
  let control c = T.control c.c
  let query c = T.query c.c
end
