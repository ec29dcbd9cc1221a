(** Hash tables keyed by immediate integers (addresses, ports, packed keys), without polymorphic
    hashing or comparison. *)

include Hashtbl.S with type key = int
