(** ARP (RFC 826) over Ethernet, as a protocol layer: the layer above addresses peers by IPv4
    address (the next hop) and ARP resolves them.

    Resolved entries expire after [ttl]. An entry that packets are sent to in its last [refresh] is
    refreshed by a unicast request to the MAC it holds (at most once per [retry_interval]) while it
    goes on being used, so an active flow never stalls for a new resolution; an entry nobody uses
    just expires. A packet for an address not yet resolved waits in a queue for that address (at
    most [queue_limit] packets; the oldest are dropped first; at most [max_queued] in all queues)
    while requests go out at most once per [retry_interval], [retries] times; then the queue is
    dropped and the connections that had packets in it are told {!Unresolved}. Requests for our
    address are answered; senders are learnt; gratuitous ARP updates existing entries, and one
    claiming our own address is answered by a gratuitous reply defending it (at most once per
    [retry_interval]).

    Resolved entries are a cache ({!Lru}) of at most [max_entries], the least recently used evicted
    for a new one; at most [max_pending] resolutions are under way, a new one giving up the oldest.
    Static entries are kept apart and never evicted. A flood of requests from random addresses
    therefore never fills the table for good.

    Receiving: a passive open on an ethertype delivers every packet of that type, on one connection
    whose [remote] is [Ipv4_addr.any] (the peer is named in the packet itself); sending on it fails.
*)

type address = { ip : Ipv4_addr.t; ethertype : int }
type address_pattern = Ethertype of int
type status = Unresolved  (** packets queued for this connection's address were dropped *)

type control =
  | Set_ip of Ipv4_addr.t  (** our address (announced with a gratuitous ARP) *)
  | Add_static of Ipv4_addr.t * Mac_addr.t  (** an entry that never expires *)
  | Remove of Ipv4_addr.t
  | Announce  (** send a gratuitous ARP request for our address *)

type info = {
  ip : Ipv4_addr.t;
  entries : (Ipv4_addr.t * Mac_addr.t option) list;  (** [None]: being resolved *)
  requests_sent : int;  (** refreshes included *)
  refreshes : int;  (** unicast requests refreshing an entry in use *)
  replies_sent : int;
  requests_received : int;
  replies_received : int;
  bad : int;  (** malformed ARP packets *)
  queue_dropped : int;  (** packets dropped from pending queues *)
  waiting : int;  (** packets waiting for a resolution now *)
  resolution_failed : int;
  conflicts : int;  (** packets from another host claiming our address *)
}

val pp_info : info Fmt.t

type config = Ip_common.neighbours
(** The ARP cache: entries last [ttl] (60 s), those in use refreshed in their last [refresh] (5 s);
    requests every [retry_interval] (1 s), [retries] (3) times; [queue_limit] packets waiting per
    address (16), [max_queued] in all (256); [max_entries] resolved (1024), [max_pending] under way
    (64). *)

val default_config : config

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ethernet

  val create :
    ?config:config -> clock:Clock.t -> pool:Consort.Pool.t -> ip:Ipv4_addr.t -> ethernet -> t
  (** [create ~clock ~pool ~ip eth] runs ARP for address [ip] on [eth]; ARP packets are allocated
      from [pool]. *)

  val lookup : t -> Ipv4_addr.t -> Mac_addr.t option
  (** [lookup t ip] is [ip]'s resolved, unexpired entry. *)

  val remote : connection -> Ipv4_addr.t
  val mac : t -> Mac_addr.t
  val mtu : t -> int
end

module Make (E : Ethernet.S) : S with type ethernet = E.t
