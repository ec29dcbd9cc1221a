(** TAP devices ([/dev/net/tun], [IFF_TAP | IFF_NO_PI]) as frame devices on an engine loop.

    The descriptor is non-blocking and watched by the loop: when it is readable, up to [batch]
    frames are read, one read per frame, each straight into a packet from the pool (with headroom,
    so replies are built in place). Each frame sent is one write; a write the kernel refuses (its
    queue full) drops the frame and is counted. *)

type t

type stats = {
  reads : int;  (** frames read *)
  wakeups : int;  (** readiness callbacks *)
  writes : int;
  write_drops : int;  (** frames the kernel would not take *)
}

val open_ :
  ?mtu:int ->
  ?mac:Consort_net.Mac_addr.t ->
  ?batch:int ->
  ?up:bool ->
  pool:Consort.Pool.t ->
  Consort_engine.Loop.t ->
  string ->
  (t, [ `Msg of string ]) result
(** [open_ ~pool loop name] creates (or attaches to) TAP interface [name] ([""]: the kernel picks
    [tapN]). [mtu] (default 1500) is the device's Ethernet payload size and, with [up] (default
    [true]), the interface's MTU as it is brought up. [mac] is our address on the link (default: a
    locally administered one derived from the process id). *)

val device : t -> Consort_net.Device.t
val name : t -> string
val fd : t -> Unix.file_descr
val stats : t -> stats

val close : t -> unit
(** [close t] stops watching and closes the descriptor (a TAP interface not made persistent
    disappears with it). *)
