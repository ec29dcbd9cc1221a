(** Client numbers for the directory's deduplication table. *)

val fresh : unit -> int64
(** Random (56 bits), with the process id mixed in. *)
