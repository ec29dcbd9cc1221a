open Consort_net
module Loop = Consort_engine.Loop

let src = Logs.Src.create "consort.tap" ~doc:"TAP devices"

module Log = (val Logs.src_log src : Logs.LOG)

external tap_open : string -> Unix.file_descr * string = "consort_tap_open"
external set_up : string -> int -> unit = "consort_tap_set_up"

external tap_read :
  Unix.file_descr -> Cstruct.buffer -> (int[@untagged]) -> (int[@untagged]) -> (int[@untagged])
  = "consort_tap_read" "consort_tap_read_untagged"
[@@noalloc]

external tap_write :
  Unix.file_descr -> Cstruct.buffer -> (int[@untagged]) -> (int[@untagged]) -> (int[@untagged])
  = "consort_tap_write" "consort_tap_write_untagged"
[@@noalloc]

external eagain_code : unit -> int = "consort_tap_eagain"

type stats = { reads : int; wakeups : int; writes : int; write_drops : int }

type t = {
  fd : Unix.file_descr;
  name : string;
  loop : Loop.t;
  pool : Consort.Pool.t;
  frame : int;
  batch : int;
  mutable device : Device.t option;
  mutable spare : Packet.t option;
  mutable closed : bool;
  mutable reads : int;
  mutable wakeups : int;
  mutable writes : int;
  mutable write_drops : int;
}

let eagain = eagain_code ()

let send t p =
  let cs = Packet.cstruct p in
  let r = tap_write t.fd cs.buffer cs.off cs.len in
  Packet.release p;
  if r >= 0 then (
    t.writes <- t.writes + 1;
    Ok ())
  else if -r = eagain then (
    t.write_drops <- t.write_drops + 1;
    Ok ())
  else Error (`System (Printf.sprintf "write to %s: errno %d" t.name (-r)))

let readable t () =
  t.wakeups <- t.wakeups + 1;
  let dev = match t.device with Some d -> d | None -> assert false in
  let rec go n =
    if n > 0 && not t.closed then begin
      let p = match t.spare with Some p -> p | None -> Packet.create t.pool t.frame in
      t.spare <- None;
      let cs = Packet.cstruct p in
      let r = tap_read t.fd cs.buffer cs.off cs.len in
      if r > 0 then begin
        t.reads <- t.reads + 1;
        Packet.trim p r;
        Device.deliver dev p;
        go (n - 1)
      end
      else begin
        t.spare <- Some p;
        if r < 0 && -r <> eagain then Log.warn (fun m -> m "read from %s: errno %d" t.name (-r))
      end
    end
  in
  go t.batch

let pid_mac () = Mac_addr.local ((Unix.getpid () lsl 8) lor 0x42)

let open_ ?(mtu = 1500) ?mac ?(batch = 64) ?(up = true) ~pool loop name =
  match tap_open name with
  | exception Unix.Unix_error (e, f, a) ->
      Error (`Msg (Printf.sprintf "%s %s: %s" f a (Unix.error_message e)))
  | exception Invalid_argument m -> Error (`Msg m)
  | fd, name -> (
      let t =
        {
          fd;
          name;
          loop;
          pool;
          frame = mtu + Ethernet_wire.sizeof_ethernet;
          batch;
          device = None;
          spare = None;
          closed = false;
          reads = 0;
          wakeups = 0;
          writes = 0;
          write_drops = 0;
        }
      in
      let mac = match mac with Some m -> m | None -> pid_mac () in
      let close () =
        if not t.closed then begin
          t.closed <- true;
          Loop.unwatch loop fd;
          (match t.spare with Some p -> Packet.release p | None -> ());
          t.spare <- None;
          Unix.close fd
        end
      in
      t.device <- Some (Device.v ~name ~mac ~mtu ~send:(send t) ~close ());
      match if up then set_up name mtu with
      | exception Unix.Unix_error (e, f, a) ->
          close ();
          Error (`Msg (Printf.sprintf "%s %s: %s" f a (Unix.error_message e)))
      | () ->
          Loop.watch loop fd (readable t);
          Ok t)

let device t = match t.device with Some d -> d | None -> assert false
let name t = t.name
let fd t = t.fd

let stats t =
  { reads = t.reads; wakeups = t.wakeups; writes = t.writes; write_drops = t.write_drops }

let close t = Device.close (device t)
