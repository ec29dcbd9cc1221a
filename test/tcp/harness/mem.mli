(** An in-memory lower layer for TCP tests: hosts on one simulated network, driven by a virtual
    clock, with seeded impairments (loss, duplication, reordering, delay, a bottleneck rate with a
    drop-tail queue). Frames are copied when sent, as a wire would. *)

type host = int

type impairments = {
  loss : float;  (** probability a frame is dropped *)
  duplicate : float;  (** probability a frame is delivered twice *)
  reorder : float;  (** probability a frame is delayed by up to [jitter] more *)
  jitter : Consort.Time.t;
  delay : Consort.Time.t;  (** one-way propagation delay *)
  rate : int option;  (** bottleneck in bytes per second, per direction *)
  queue : int;  (** bytes the bottleneck queue holds before it drops *)
}

val perfect : impairments
(** No loss, 1 ms delay, no rate limit. *)

type net

val create_net :
  ?seed:int -> ?impairments:impairments -> Clock.Virtual.clock -> Consort.Pool.t -> net

val set_impairments : net -> impairments -> unit
val clock : net -> Clock.t
val pool : net -> Consort.Pool.t

val on_frame : net -> (Consort.Time.t -> src:host -> dst:host -> string -> unit) -> unit
(** [on_frame net f] calls [f] for every frame sent (before impairments). *)

val set_drop : net -> (src:host -> dst:host -> string -> bool) option -> unit
(** [set_drop net (Some f)] drops every frame for which [f] holds, before the random impairments. *)

type counts = { sent : int; delivered : int; lost : int; duplicated : int; queue_drops : int }

val counts : net -> counts

val pseudo : src:host -> dst:host -> len:int -> int
(** The unfolded pseudo-header sum, as IPv4 would make it for hosts read as 32-bit addresses. *)

include
  Tcp.LOWER
    with type host := host
     and type address = host
     and type address_pattern = unit
     and type status = Tcp_icmp.t
     and type control = unit
     and type info = unit

val attach : ?mtu:int -> net -> host -> t
(** [attach net h] is the endpoint of host [h] on [net]; [mtu] (default 1480) is the largest packet
    it sends. *)

val host : t -> host

val inject : net -> src:host -> dst:host -> string -> unit
(** [inject net ~src ~dst frame] delivers [frame] to [dst] at once, as if [src] (any host, attached
    or not) had sent it: spoofing. *)

val connections : t -> int
(** Lower connections the endpoint holds (one per peer in use). *)

val icmp : net -> at:host -> about:host -> Tcp_icmp.t -> unit
(** [icmp net ~at ~about e] reports the ICMP error [e] to host [at], about a segment it sent to
    [about] (as IPv4 does, on that connection). *)
