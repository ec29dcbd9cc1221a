(** What IPv4 and IPv6 share: the connection tables, fragment reassembly, the neighbour cache (ARP
    and neighbour discovery) and the ICMP rate limit. Each is written once, over the key type of its
    IP version; every bounded table in them is an {!Lru.Make} cache. *)

module Int_key : Hashtbl.HashedType with type t = int
module String_key : Hashtbl.HashedType with type t = string

(** {1 Connection tables} *)

(** A connection's key: its remote address and protocol (next header) packed into one value. *)
module type KEY = sig
  include Hashtbl.HashedType

  type addr

  val make : addr -> int -> t
  (** [make peer proto] is the key of the connection to [peer] for [proto]. *)

  val equal_addr : addr -> addr -> bool
end

(** Connections per (remote address, protocol), shared and counted: those opened actively stay
    (pinned) until their last user closes them; those a passive open made (the first datagram from a
    new source, taken by a listener) are a bounded cache, the least recently used evicted, those
    idle too long dropped. Listeners per protocol, for one source or ([None]) any; a datagram goes
    to the listener of its source before the one for any. *)
module Conns (K : KEY) : sig
  type ('ip, 'h) conn = {
    ip : 'ip;  (** the IP instance *)
    peer : K.addr;
    proto : int;
    key : K.t;
    mutable handler : 'h;
    mutable users : int;
    mutable is_pinned : bool;
  }

  type ('ip, 'h) t

  val create :
    protocol:string ->
    in_use:string ->
    idle:Consort.Time.t ->
    now:(unit -> Consort.Time.t) ->
    int ->
    ('ip, 'h) t
  (** [create ~protocol ~in_use ~idle ~now max] keeps at most [max] passively made connections, none
      idle for longer than [idle]. [protocol] names the protocol number in errors about it
      ("protocol", "next header"), [in_use] a listener already there ("IP protocol").
      @raise Invalid_argument if [max < 1]. *)

  val key : K.addr -> int -> K.t

  val find : ('ip, 'h) t -> K.t -> ('ip, 'h) conn option
  (** The connection of this key (marked used, if passively made). *)

  val accept :
    ('ip, 'h) t -> ip:'ip -> nothing:'h -> peer:K.addr -> proto:int -> ('ip, 'h) conn option
  (** [accept t ~ip ~nothing ~peer ~proto] is the connection a datagram from [peer] for [proto] goes
      to: the one there is, or a new one made by a listener (its handler [nothing] until the
      listener's function has given it one); [None] if nobody takes it. *)

  val active_open :
    ('ip, 'h) t ->
    ip:'ip ->
    nothing:'h ->
    route:(K.addr -> ('r, Protocol.error) result) ->
    K.addr ->
    int ->
    (('ip, 'h) conn -> 'h) ->
    (('ip, 'h) conn, Protocol.error) result
  (** The connection there is (pinned now, one more user), or a new pinned one unless [route] says
      why not. *)

  val passive_open :
    ('ip, 'h) t ->
    protocol:int ->
    source:K.addr option ->
    (('ip, 'h) conn -> 'h) ->
    (unit, Protocol.error) result

  val close : ('ip, 'h) t -> ('ip, 'h) conn -> unit
  (** One user fewer; at none, the connection is forgotten. *)

  val length : ('ip, 'h) t -> int
  val evicted : ('ip, 'h) t -> int
  val expire : ('ip, 'h) t -> unit

  val counts : ('ip, 'h) t -> int * int
  (** [(length t, evicted t)]. *)
end

(** {1 Reassembly} *)

type reassembly = {
  timeout : Consort.Time.t;  (** default 30 s *)
  max_bytes : int;  (** default 1 MiB *)
  max_fragments : int;  (** default 64 *)
  max_datagrams : int;  (** default 64 *)
}

val default_reassembly : reassembly

(** Fragments of datagrams in progress, keyed by what identifies a datagram (source, protocol and
    identification in IPv4; source, destination and identification in IPv6). At most [max_datagrams]
    in progress, [max_bytes] of fragments in all, [max_fragments] per datagram, each for at most
    [timeout]. A new datagram over [max_datagrams], or a fragment over [max_bytes], gives up the
    datagrams started longest ago (a flood of fragments that never complete cannot lock out new
    ones); a fragment over [max_fragments], overlapping another (an exact duplicate is ignored) or
    disagreeing on the datagram's end drops its datagram. *)
module Reassembly (K : Hashtbl.HashedType) : sig
  type 'm t
  (** ['m]: what the first fragment (offset 0) tells of the datagram, given back whole with it. *)

  type 'm verdict =
    | Bad  (** a malformed fragment (empty, not a multiple of 8 but the last, past the maximum) *)
    | Held  (** kept, ignored or dropped, its datagram not complete *)
    | Complete of Packet.t * 'm  (** the datagram's payload, whole *)

  val create :
    clock:Clock.t -> pool:Consort.Pool.t -> headroom:int -> max_payload:int -> reassembly -> 'm t
  (** Datagrams are reassembled in packets from [pool] with [headroom] in front; a fragment ending
      past [max_payload] is bad. *)

  val add : 'm t -> K.t -> off:int -> more:bool -> header:int -> meta:'m -> Packet.t -> 'm verdict
  (** [add t k ~off ~more ~header ~meta p] takes the fragment [p] of datagram [k], whose window
      starts [header] bytes before its payload (offset [off] in the datagram; [more] unless it is
      the last). It takes [p]. *)

  val reassembled : 'm t -> int

  val dropped : 'm t -> int
  (** Datagrams given up: limits, overlaps. *)

  val timeouts : 'm t -> int

  val counts : 'm t -> int * int * int
  (** [(reassembled t, dropped t, timeouts t)]. *)
end

(** {1 Neighbour cache} *)

type neighbours = {
  ttl : Consort.Time.t;  (** how long a resolved entry lasts, default 60 s (IPv6: 30 s) *)
  refresh : Consort.Time.t;  (** an entry in use is refreshed in its last [refresh], default 5 s *)
  retry_interval : Consort.Time.t;  (** default 1 s *)
  retries : int;  (** requests or solicitations before giving up, default 3 *)
  queue_limit : int;  (** packets waiting per address, default 16 *)
  max_queued : int;  (** packets waiting in all, default 256 *)
  max_entries : int;  (** resolved entries, default 1024 *)
  max_pending : int;  (** resolutions under way, default 64 *)
}
(** The neighbour cache of ARP ({!Arp.config}) and of IPv6 neighbour discovery
    ({!Ipv6.config}[.neighbours]). *)

val default_neighbours : neighbours

(** Resolution of an IP address to a MAC address, as ARP and neighbour discovery do it: static
    entries; resolved entries (at most [max_entries], least recently used evicted) lasting [ttl];
    resolutions under way (at most [max_pending], the oldest given up for a new one), each with the
    packets waiting for it, retried every [retry_interval] [retries] times. What is sent (requests,
    solicitations, the waiting packets) is the caller's, by the functions it passes. *)
module Neighbours (K : Hashtbl.HashedType) : sig
  type 'q t
  (** ['q]: a packet waiting for its address, with what the caller needs to send it. *)

  val create :
    clock:Clock.t ->
    packet:('q -> Packet.t) ->
    gave_up:(K.t -> 'q list -> unit) ->
    neighbours ->
    'q t
  (** [gave_up k waiting] is called when the resolution of [k] is given up, after the packets that
      waited ([waiting], oldest first) are released.
      @raise Invalid_argument if [max_entries] or [max_pending] is below 1. *)

  val lookup : 'q t -> K.t -> Mac_addr.t option
  (** A static entry or a resolved one not expired. *)

  val resolve : 'q t -> K.t -> refresh:(K.t -> Mac_addr.t -> unit) -> Mac_addr.t option
  (** {!lookup} for a packet on its way: marks the entry used, and calls [refresh k mac] (a unicast
      request) for an entry in its last [refresh], at most once every [retry_interval]. *)

  val wait : 'q t -> K.t -> 'q -> solicit:(K.t -> unit) -> unit
  (** [wait t k q ~solicit] queues [q] until [k] is resolved, starting a resolution (the first
      [solicit k] now) if none is under way. When [max_queued] packets wait in all, the resolution
      started longest ago is given up (or, if it is [k]'s, its oldest packet dropped). *)

  val learn :
    'q t -> K.t -> Mac_addr.t -> create:bool -> transmit:(Mac_addr.t -> 'q -> unit) -> unit
  (** [learn t k mac ~create ~transmit] updates [k]'s entry (unless static), making one if [create]
      or a resolution is under way, and sends what waited for it. *)

  val known : 'q t -> K.t -> bool
  (** Static, resolved or under way. *)

  val add_static : 'q t -> K.t -> Mac_addr.t -> unit
  val forget_resolved : 'q t -> K.t -> unit

  val flush_pending : 'q t -> K.t -> Mac_addr.t -> transmit:(Mac_addr.t -> 'q -> unit) -> unit
  (** Ends [k]'s resolution, if any, sending what waited to [mac]. *)

  val remove : 'q t -> K.t -> unit
  (** Forgets [k]: static, resolved, and any resolution under way given up. *)

  val entries : 'q t -> (K.t * Mac_addr.t option) list
  (** Static and unexpired entries, and [None] for each resolution under way, in no order. *)

  val queued : 'q t -> int
  val queue_dropped : 'q t -> int
  val resolution_failed : 'q t -> int
end

(** {1 Counters} *)

type counters = {
  mutable sent : int;  (** datagrams, whole or in fragments *)
  mutable received : int;  (** delivered to a connection *)
  mutable bad : int;  (** malformed, or from a source that cannot be *)
  mutable not_for_us : int;
  mutable no_route : int;
  mutable unknown_protocol : int;  (** nobody took them *)
  mutable fragments_sent : int;
  mutable fragments_received : int;
  mutable icmp_errors_sent : int;
}
(** What every IP version counts, in one record of its instance. *)

val counters : unit -> counters
(** All zero. *)

type 'v info = {
  mtu : int;
  sent : int;
  received : int;
  bad : int;
  not_for_us : int;
  no_route : int;
  unknown_protocol : int;
  fragments_sent : int;
  fragments_received : int;
  reassembled : int;
  reassembly_dropped : int;  (** datagrams given up: limits, overlaps *)
  reassembly_timeouts : int;
  icmp_errors_sent : int;
  connections : int;
  connections_evicted : int;
  version : 'v;
}
(** An IP instance's [Protocol.S.info]: what both versions count, and the version's own part (['v]:
    {!Ipv4.v4}, {!Ipv6.v6}). *)

val info :
  counters -> mtu:int -> reassembly:int * int * int -> connections:int * int -> 'v -> 'v info
(** [info c ~mtu ~reassembly ~connections v]: the counters [c] now, with {!Reassembly.counts} and
    {!Conns.counts}. *)

val pp_fragments : _ info Fmt.t
(** ["fragments 2 out 0 in, 0 reassembled, 0 given up, 0 timed out"]: the part of both versions'
    [pp_info] about fragments. *)

val pp_connections : _ info Fmt.t
(** ["3 connections (0 evicted)"]. *)

(** {1 Sending} *)

val route :
  ('a -> 'h option) -> counters -> 'a Fmt.t -> 'a -> ('h, [> `Unreachable of string ]) result
(** [route next_hop c pp dst] is [dst]'s next hop, or (counted in [c.no_route]) the error that names
    it unreachable. *)

val send_fragments :
  pool:Consort.Pool.t ->
  headroom:int ->
  chunk:int ->
  Packet.t ->
  (Packet.t -> off:int -> more:bool -> (unit, 'e) result) ->
  (unit, 'e) result
(** [send_fragments ~pool ~headroom ~chunk p send] cuts [p]'s payload into pieces of [chunk] bytes
    (the last one shorter), each copied into a fresh packet with [headroom], and calls
    [send q ~off ~more] on each in order ([off] its place in [p], [more] unless it is the last). It
    takes [p]; the result is the first error, if any. *)

(** {1 ICMP rate limit} *)

type rate

val rate : now:Consort.Time.t -> int -> rate
(** [rate ~now n]: at most [n] a second. *)

val allowed : rate -> now:Consort.Time.t -> bool
(** Whether one more may go now (counted). *)
