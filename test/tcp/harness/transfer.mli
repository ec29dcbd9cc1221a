(** Bulk transfers between two TCP stacks over a {!Mem} network, verified byte for byte. *)

type result = {
  bytes : int;  (** bytes received and verified *)
  virtual_time : Consort.Time.t;  (** from connect to the receiver's end of stream *)
  real_time : float;  (** seconds of CPU wall clock for the whole run *)
  retransmitted : int;  (** segments retransmitted by the sender *)
  fast_retransmits : int;
  timeouts : int;
  sender : Tcp.conn_info;  (** the sender's connection when its last byte was acknowledged *)
  receiver : Tcp.conn_info;
  net : Mem.counts;
}

val pp_result : result Fmt.t

val payload : seed:int -> int -> Bytes.t
(** [payload ~seed n] is [n] pseudo-random bytes determined by [seed]. *)

val run :
  ?config:Tcp.config ->
  ?receiver_config:Tcp.config ->
  ?checksum:bool ->
  ?mtu:int ->
  ?impairments:Mem.impairments ->
  ?seed:int ->
  ?chunk:int ->
  ?read_size:int ->
  ?read_pause:Consort.Time.t ->
  ?limit:Consort.Time.t ->
  ?prelude:(Mem.net -> (module Node.S) -> unit) ->
  int ->
  result
(** [run n] connects host 1 to host 2, sends [n] pseudo-random bytes, shuts down, and checks every
    byte the receiver reads, then that both sides close normally and no buffer leaked. [checksum]
    (default true) turns the pseudo-header checksum on; [mtu] is the link's. [prelude] runs once the
    receiver (host 2) listens on port 80, before host 1 connects (to flood it first).
    @raise Failure with a description when any check fails. *)
