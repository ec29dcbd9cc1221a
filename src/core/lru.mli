(** Bounded tables: at most [capacity] entries, the least recently used evicted to make room for a
    new one, and (with [idle]) entries unused for that long dropped.

    What a stranger can make a protocol remember (peers, connections, neighbours) lives in one of
    these, so a flood of new keys costs at most [capacity] entries and pushes out only the entries
    that have been quiet longest: a host that keeps talking stays, and a new host always gets a
    place. Every operation is O(1) (amortised, for the idle expiry). *)

(** Tables with keys of any hashable type. *)
module type S = sig
  type key
  type 'a t

  val create : ?idle:Time.t -> ?now:(unit -> Time.t) -> ?on_evict:(key -> 'a -> unit) -> int -> 'a t
  (** [create capacity] is an empty table holding at most [capacity] entries. With [idle] (and
      [now], the clock), an entry not used for [idle] is dropped at the next operation that looks at
      the table's old end. [on_evict k v] is called for each entry dropped by the table itself (to
      make room, or idle), not for those {!remove}d.
      @raise Invalid_argument if [capacity < 1]. *)

  val find : 'a t -> key -> 'a option
  (** [find t k] is [k]'s value, marking it used now. *)

  val peek : 'a t -> key -> 'a option
  (** [peek t k] is [k]'s value, without marking it used. *)

  val mem : 'a t -> key -> bool

  val add : 'a t -> key -> 'a -> unit
  (** [add t k v] binds [k] to [v] (replacing any binding), marked used now; if [t] is full, the
      least recently used entry is evicted first. *)

  val oldest : 'a t -> (key * 'a) option
  (** [oldest t] is the least recently used entry. *)

  val remove : 'a t -> key -> unit
  val length : 'a t -> int
  val capacity : 'a t -> int

  val evicted : 'a t -> int
  (** Entries dropped by the table itself since it was made (room or idle). *)

  val expire : 'a t -> unit
  (** [expire t] drops every idle entry now. *)

  val iter : (key -> 'a -> unit) -> 'a t -> unit
  (** [iter f t] calls [f] on every entry, most recently used first; [f] must not change [t]. *)

  val fold : (key -> 'a -> 'b -> 'b) -> 'a t -> 'b -> 'b

  val clear : 'a t -> unit
  (** [clear t] removes every entry (without [on_evict]). *)
end

module Make (K : Hashtbl.HashedType) : S with type key = K.t

include S with type key = int
(** Tables keyed by immediate integers. *)
