(** The virtual circuit requests (VAMNET's [virtcirc]), carried by the RPC.

    A circuit has two ends, each an object with its own capability; each end writes into one bounded
    buffer and reads from the other. Every request names positions in a byte stream, so that each is
    idempotent and may be resent after a lost reply:

    - [vc_write]: [offset] = the stream position of the data's first byte; reply [offset] = the
      bytes of this stream accepted so far (the writer goes on from there). Needs
      {!Consort_cap.Rights.modify}.
    - [vc_read]: [offset] = the bytes consumed so far (everything before is acknowledged and freed),
      [size] = the most bytes wanted, [extra] = the interrupts seen so far; reply: the data from
      [offset], [size] = the interrupts sent by the other end so far, [extra] = {!eof_flag} when the
      stream ends after this data. Needs {!Consort_cap.Rights.read}.
    - [vc_close]: end of this end's output at stream position [offset]. Needs
      {!Consort_cap.Rights.modify}.
    - [vc_intr]: [extra] = the number of interrupts this end has sent so far (a counter, so a resent
      one is not counted twice). Needs {!Consort_cap.Rights.modify}.
    - [vc_hangup]: both directions end at once; data not read is lost. Needs
      {!Consort_cap.Rights.modify}.

    A hung-up circuit answers {!hungup}, with the reason as data. *)

val vc_write : int
val vc_read : int
val vc_close : int
val vc_intr : int
val vc_hangup : int
val eof_flag : int

val max_chunk : int
(** The largest write or read, 60 KiB: one loopback fragment. *)

val hungup : Consort_cap.Status.t
(** [`Other 120]: the circuit was hung up. *)

val command_name : int -> string
