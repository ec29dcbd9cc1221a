type stats = {
  tx_frames : int;
  tx_bytes : int;
  tx_errors : int;
  rx_frames : int;
  rx_bytes : int;
  rx_unclaimed : int;
}

type t = {
  name : string;
  mac : Mac_addr.t;
  mtu : int;
  send_fn : Packet.t -> (unit, Protocol.error) result;
  close_fn : unit -> unit;
  mutable receive : (Packet.t -> unit) option;
  mutable tx_frames : int;
  mutable tx_bytes : int;
  mutable tx_errors : int;
  mutable rx_frames : int;
  mutable rx_bytes : int;
  mutable rx_unclaimed : int;
}

module type S = sig
  type t

  val name : t -> string
  val mac : t -> Mac_addr.t
  val mtu : t -> int
  val send : t -> Packet.t -> (unit, Protocol.error) result
  val set_receive : t -> (Packet.t -> unit) -> unit
  val close : t -> unit
end

let v ~name ~mac ~mtu ~send ?(close = fun () -> ()) () =
  {
    name;
    mac;
    mtu;
    send_fn = send;
    close_fn = close;
    receive = None;
    tx_frames = 0;
    tx_bytes = 0;
    tx_errors = 0;
    rx_frames = 0;
    rx_bytes = 0;
    rx_unclaimed = 0;
  }

let name t = t.name
let mac t = t.mac
let mtu t = t.mtu

let send t p =
  let n = Packet.length p in
  match t.send_fn p with
  | Ok () as ok ->
      t.tx_frames <- t.tx_frames + 1;
      t.tx_bytes <- t.tx_bytes + n;
      ok
  | Error _ as e ->
      t.tx_errors <- t.tx_errors + 1;
      e

let set_receive t f = t.receive <- Some f
let close t = t.close_fn ()

let deliver t p =
  match t.receive with
  | Some f ->
      t.rx_frames <- t.rx_frames + 1;
      t.rx_bytes <- t.rx_bytes + Packet.length p;
      f p
  | None ->
      t.rx_unclaimed <- t.rx_unclaimed + 1;
      Packet.release p

let stats (t : t) =
  {
    tx_frames = t.tx_frames;
    tx_bytes = t.tx_bytes;
    tx_errors = t.tx_errors;
    rx_frames = t.rx_frames;
    rx_bytes = t.rx_bytes;
    rx_unclaimed = t.rx_unclaimed;
  }

let pp_stats ppf (s : stats) =
  Fmt.pf ppf "tx %d frames %d bytes (%d errors), rx %d frames %d bytes (%d unclaimed)" s.tx_frames
    s.tx_bytes s.tx_errors s.rx_frames s.rx_bytes s.rx_unclaimed
