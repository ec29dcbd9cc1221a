(** Frame devices: what Ethernet runs on.

    A device sends whole Ethernet frames (header included, no frame check sequence) and hands
    received frames up by upcall. Devices are values of one type {!t}, so wrappers ({!Impair},
    {!Pcap}) compose with any device (TAP, {!Mem_link}); the signature {!S} is what the Ethernet
    functor asks for, and this module matches it. *)

type t

type stats = {
  tx_frames : int;
  tx_bytes : int;
  tx_errors : int;  (** frames the device refused or failed to send *)
  rx_frames : int;
  rx_bytes : int;
  rx_unclaimed : int;  (** frames received with no receiver set *)
}

val v :
  name:string ->
  mac:Mac_addr.t ->
  mtu:int ->
  send:(Packet.t -> (unit, Protocol.error) result) ->
  ?close:(unit -> unit) ->
  unit ->
  t
(** [v ~name ~mac ~mtu ~send ()] is a device whose frames go out through [send] (which owns the
    packet it is given). Received frames come in through {!deliver}. *)

(** What a frame device provides. *)
module type S = sig
  type t

  val name : t -> string
  val mac : t -> Mac_addr.t

  val mtu : t -> int
  (** The largest Ethernet payload (1500 for standard Ethernet); frames are up to [mtu + 14] bytes.
  *)

  val send : t -> Packet.t -> (unit, Protocol.error) result
  (** [send t frame] sends [frame]'s window as one frame; [t] owns it (and releases it) from then
      on, whatever the result. *)

  val set_receive : t -> (Packet.t -> unit) -> unit
  (** [set_receive t f] makes [f] the upcall for received frames; [f] owns each frame it is given.
  *)

  val close : t -> unit
end

include S with type t := t

val deliver : t -> Packet.t -> unit
(** [deliver t frame] hands a received frame to [t]'s receiver (for device implementations); without
    a receiver the frame is released and counted. *)

val stats : t -> stats
val pp_stats : stats Fmt.t
