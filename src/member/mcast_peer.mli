(** One member of a group of processes casting reliably over kernel UDP.

    The member runs the stack [Mnak; Bottom] over {!Consort_engine.Udp}, drops a seeded fraction of
    the datagrams it receives (a test filter: the machine has no network emulator), casts its share
    of messages paced from a timer, and checks with {!Consort_spec.Fifo} that it delivers every
    member's casts, its own included, exactly once and in order. It stays until everything it
    delivered is stable (no one can still need it for a retransmission) or the deadline passes,
    prints one summary line to standard output, and errors after it. *)

(** Why the member cannot run. *)
type error =
  | Bad_argument of string  (** a rank, count or loss out of range *)
  | Endpoint of Consort_engine.Endpoint.error  (** a bad address, a port in use *)
  | Drop_filter of Consort.Transport.error

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

val run :
  rank:int ->
  members:string array ->
  counts:int array ->
  loss:float ->
  seed:int ->
  deadline:float ->
  (bool, error) result
(** [run ~rank ~members ~counts ~loss ~seed ~deadline] is [Ok true] if this member delivered every
    cast ([counts.(r)] from rank [r]) exactly once in FIFO order, leaked no buffer, and met no
    error, within [deadline] seconds. *)
