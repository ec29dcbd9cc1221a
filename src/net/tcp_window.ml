(* Integer comparisons compiled as such (Stdlib's [min] and [max] are
   polymorphic, and every segment pays for them). *)
let min (a : int) b = if a < b then a else b
let max (a : int) b = if a > b then a else b

let scale_for bytes =
  let rec go s = if s >= 14 || bytes lsr s <= 0xFFFF then s else go (s + 1) in
  go 0

let receive_window ~rcv_nxt ~rcv_adv = max 0 (Tcp_seq.sub rcv_adv rcv_nxt)

let advertise ~buffer ~unconsumed ~rcv_nxt ~rcv_adv ~rcv_mss ~shift =
  let avail = max 0 (buffer - unconsumed) in
  let cur = receive_window ~rcv_nxt ~rcv_adv in
  let threshold = max 1 (min (buffer / 2) rcv_mss) in
  let w = if avail - cur >= threshold then avail else cur in
  let field = min 0xFFFF ((w + (1 lsl shift) - 1) lsr shift) in
  let edge = Tcp_seq.add rcv_nxt (field lsl shift) in
  (field, if Tcp_seq.gt edge rcv_adv then edge else rcv_adv)

let send_room ~snd_una ~snd_wnd ~snd_nxt = Tcp_seq.sub (Tcp_seq.add snd_una snd_wnd) snd_nxt

let update_after_read ~buffer ~unconsumed ~open_now ~rcv_mss ~shift =
  let largest = min buffer (0xFFFF lsl shift) in
  let avail = min largest (buffer - unconsumed) in
  let threshold = max 1 (min (buffer / 2) rcv_mss) in
  open_now < largest / 2 && avail - open_now >= threshold
