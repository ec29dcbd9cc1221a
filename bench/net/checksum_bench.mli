(** The Internet checksum in GB/s beside memcpy ([Cstruct.blit]) of the same bytes, measured in the
    same run.

    Each size is run over a ring of buffers that fits in the L2 cache, so both sides read warm
    memory as a stack's receive path would. *)

type row = {
  size : int;  (** bytes per call *)
  checksum_gbps : float;  (** GB/s (10{^ 9} bytes/s) summed by {!Consort_net.Checksum.sum} *)
  memcpy_gbps : float;  (** GB/s copied by [Cstruct.blit] *)
  reference_gbps : float;  (** GB/s summed by the OCaml reference *)
}

val run : ?sizes:int list -> ?seconds:float -> unit -> row list
(** [run ()] measures sizes 64, 576, 1500, 9000 and 65536 (default), each side for about [seconds]
    (default 0.1), best of three rounds. *)

val pp_table : row list Fmt.t
(** A table with the ratio checksum/memcpy per size. *)
