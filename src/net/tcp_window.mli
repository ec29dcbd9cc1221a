(** Window arithmetic of RFC 9293 and RFC 7323: the receive window to advertise (with receiver
    silly-window avoidance, never shrinking), the window-scale shift for a buffer, and the usable
    send window. Pure. *)

val scale_for : int -> int
(** [scale_for bytes] is the smallest shift (at most 14) that lets a 16-bit field carry [bytes]. *)

val advertise :
  buffer:int ->
  unconsumed:int ->
  rcv_nxt:Tcp_seq.t ->
  rcv_adv:Tcp_seq.t ->
  rcv_mss:int ->
  shift:int ->
  int * Tcp_seq.t
(** [advertise ~buffer ~unconsumed ~rcv_nxt ~rcv_adv ~rcv_mss ~shift] is the window field to send
    and the right edge it announces. The window opens only by at least min(buffer / 2, MSS) (RFC
    9293 section 3.8.6.2.2) and never retreats below the edge already announced [rcv_adv]. *)

val receive_window : rcv_nxt:Tcp_seq.t -> rcv_adv:Tcp_seq.t -> int
(** Bytes of the window last advertised still open. *)

val send_room : snd_una:Tcp_seq.t -> snd_wnd:int -> snd_nxt:Tcp_seq.t -> int
(** [send_room] is how far the peer's window reaches past [snd_nxt] (negative when the window shrank
    behind it). *)

val update_after_read :
  buffer:int -> unconsumed:int -> open_now:int -> rcv_mss:int -> shift:int -> bool
(** [update_after_read] holds when the application's read opened the window enough that a window
    update should go at once: it was under half the largest window and opens by at least min(buffer
    / 2, MSS). *)
