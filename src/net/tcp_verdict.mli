(** The checks of RFC 9293 section 3.10.7.4 for a segment arriving on a synchronized connection,
    with RFC 5961 and RFC 7323 (PAWS), as pure functions that return a verdict for the connection to
    act on. *)

type paws =
  | Fresh  (** the timestamp passes, or PAWS does not apply *)
  | Stale  (** an older timestamp than the last one recorded: drop, ACK *)
  | Missing  (** no timestamp where both sides agreed on them: drop silently *)

val paws :
  ts_ok:bool ->
  rst:bool ->
  syn:bool ->
  ts_val:int option ->
  ts_recent:int ->
  ts_recent_age:Consort.Time.t ->
  now:Consort.Time.t ->
  paws
(** RFC 7323 section 5.3 (a RST is never rejected by PAWS; a timestamp recorded more than 24 days
    ago no longer counts). *)

val update_ts_recent :
  ts_val:int -> ts_recent:int -> seq:Tcp_seq.t -> last_ack_sent:Tcp_seq.t -> bool
(** RFC 7323 section 4.3: record [ts_val] when it is not older and the segment covers the last
    acknowledgement sent. *)

val acceptable : rcv_nxt:Tcp_seq.t -> rcv_wnd:int -> seq:Tcp_seq.t -> seg_len:int -> bool
(** The four cases of the acceptability test (first, "check sequence number"). [seg_len] counts SYN
    and FIN. *)

val zero_window_probe :
  rcv_nxt:Tcp_seq.t -> rcv_wnd:int -> seq:Tcp_seq.t -> seg_len:int -> syn:bool -> bool
(** A segment that fails the test only because the window is closed and starts at RCV.NXT: its ACK
    and window are still processed. *)

type rst = Reset | Challenge_ack

val rst : rcv_nxt:Tcp_seq.t -> seq:Tcp_seq.t -> rst
(** Second, an acceptable RST (RFC 5961 section 3.2): it resets only at exactly RCV.NXT; elsewhere
    in the window it draws a challenge ACK. *)

type syn = Back_to_listen | Syn_challenge_ack

val syn : state:Tcp_types.state -> passive:bool -> syn
(** Fourth, a SYN on a synchronized connection (RFC 5961 section 4): a challenge ACK, except that a
    passive connection still in SYN-RECEIVED returns to LISTEN. *)

type ack =
  | Too_new  (** acknowledges data not sent: ACK and drop *)
  | Too_old  (** older than SND.UNA - MAX.SND.WND (RFC 5961 5.2): challenge ACK *)
  | Old  (** below SND.UNA but within the window: ignore the ACK field *)
  | Duplicate  (** equal to SND.UNA *)
  | New of int  (** acknowledges that many new sequence numbers *)

val ack : snd_una:Tcp_seq.t -> snd_max:Tcp_seq.t -> max_snd_wnd:int -> ack:Tcp_seq.t -> ack
(** Fifth, the ACK field in a synchronized state. *)

val syn_received_ack : snd_una:Tcp_seq.t -> snd_max:Tcp_seq.t -> ack:Tcp_seq.t -> bool
(** In SYN-RECEIVED, whether the ACK completes the handshake (otherwise the segment draws a RST). *)

val window_update :
  snd_una:Tcp_seq.t ->
  snd_wl1:Tcp_seq.t ->
  snd_wl2:Tcp_seq.t ->
  seq:Tcp_seq.t ->
  ack:Tcp_seq.t ->
  bool
(** Whether the segment's window replaces SND.WND (SND.WL1 and SND.WL2). *)
