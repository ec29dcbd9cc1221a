(** Ethernet II over a frame device.

    A connection is one (peer MAC, ethertype) pair, shared: an active open of a pair that has a
    connection returns it (keeping its handler) and counts one more user; [close] ends it when its
    last user closes it. Connections to group addresses are for sending only. A passive open on an
    ethertype makes a connection for each new peer that sends frames of that type; frames for other
    hosts, runts and frames of unopened types are counted and dropped.

    The connections a passive open made are a cache ({!Lru}): at most [max_peers] per type, the
    least recently heard from evicted to make room for a new peer, and (given a clock) those silent
    for [peer_idle] dropped. An evicted peer that sends again gets a new connection from the
    listener, so a flood of random source addresses never locks out a new host. Connections opened
    actively stay until closed. *)

type address = { dst : Mac_addr.t; ethertype : int }
type address_pattern = Ethertype of int  (** every peer sending this type *)

(** Ethernet has nothing to report. *)
type status = |

type control = Promiscuous of bool  (** accept unicast frames for other hosts *)

type info = {
  mac : Mac_addr.t;
  mtu : int;
  frames_in : int;  (** delivered up *)
  frames_out : int;
  runts : int;  (** shorter than a header *)
  not_for_us : int;
  unknown_type : int;
  bad_source : int;  (** a group (multicast) source address *)
  peers : int;  (** connections now, of every type *)
  peers_evicted : int;  (** passively made connections evicted (room or idle) *)
}

val pp_info : info Fmt.t

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type host = Mac_addr.t
  (** The peer's address, as {!remote} gives it. *)

  type device

  val create : ?max_peers:int -> ?peer_idle:Consort.Time.t -> ?clock:Clock.t -> device -> t
  (** [create dev] runs Ethernet on [dev] (taking over its receive upcall), keeping at most
      [max_peers] (default 1024) passively made connections per type, and with [clock] dropping
      those idle for [peer_idle] (default 300 s).
      @raise Invalid_argument if [max_peers < 1]. *)

  val mac : t -> Mac_addr.t
  val mtu : t -> int

  val send_to : connection -> dst:Mac_addr.t -> Packet.t -> (unit, Protocol.error) result
  (** [send_to c ~dst p] sends [p] with [c]'s type to [dst] instead of [c]'s peer (ARP resolves many
      peers over one connection this way). *)

  val remote : connection -> host
end

module Make (D : Device.S) : S with type device = D.t
