(** Virtual circuits: full-duplex byte streams between two ends, hosted by one process and reached
    by the other through the RPC (VAMNET's [virtcirc]: a distributed circular buffer).

    The host keeps, per circuit, one bounded ring buffer per direction. Its handler ({!handle})
    answers the requests of {!Vc_proto}; the host's own end uses the same handler with no RPC in
    between (see {!Vc_end.local}).

    {b Flow control.} A direction holds at most [capacity] bytes written and not yet acknowledged by
    its reader; a write that does not fit takes what fits, and one that finds no room is held until
    there is (or for [hold], then answered with no progress, and the writer asks again). A read that
    finds nothing is held likewise. At most one held read and one held write per direction: a newer
    one answers the older.

    {b End of file, hang-up, interrupt.} [vc_close] ends one direction at a position; the reader
    gets its last bytes with the end-of-file flag. [vc_hangup] (or [std_destroy] on an end) ends
    both directions at once: held requests and every later one are answered {!Vc_proto.hungup}. An
    interrupt is counted; a held read returns at once with the new count.

    {b A peer that dies.} An end that is not heard from (no request, not even [std_touch]) for
    [silence] hangs the circuit up. A hung-up circuit is forgotten after [linger]; its ends then
    answer [STD_NOTFOUND].

    {b Bounds.} Circuits are made only by the host ({!create}), at most [max_circuits]; a stranger
    can allocate nothing: every request either fits a fixed buffer or is refused ([STD_ARGBAD]: a
    write or read past the stream's end, before what was acknowledged, or larger than
    {!Vc_proto.max_chunk}). *)

open Consort_cap

type config = {
  capacity : int;  (** bytes per direction (default 64 KiB) *)
  hold : Consort.Time.t;  (** a held read or write is answered after this (default 1 s) *)
  silence : Consort.Time.t;  (** an end not heard from this long hangs up (default 10 s) *)
  linger : Consort.Time.t;  (** a hung-up circuit is forgotten after this (default 10 s) *)
  max_circuits : int;  (** default 256 *)
}

val default_config : config

type t

val create_host : ?config:config -> ?g:Mirage_crypto_rng.g -> Port.t -> t
(** A host for circuits of [port] (the port of the server the caller runs, whose requests it hands
    to {!handle}). *)

val port : t -> Port.t

type circuit = { a : Cap.t; b : Cap.t }
(** The owner capabilities of a circuit's two ends. *)

val create : t -> now:Consort.Time.t -> (circuit, [ `Full ]) result

val handle : t -> now:Consort.Time.t -> Header.t -> string -> (Header.t * string -> unit) -> unit
(** [handle t ~now h data reply] carries out one request and calls [reply] once, at once or later (a
    held read or write: from {!tick} or from the request that frees it). It never raises. Requests
    not of {!Vc_proto} and not standard get [STD_COMBAD]. *)

val tick : t -> now:Consort.Time.t -> unit
(** Answers held requests older than [hold], hangs up circuits whose end fell silent, forgets those
    hung up for longer than [linger]. Call it every few hundred milliseconds. *)

val hangup : t -> now:Consort.Time.t -> Cap.t -> string -> unit
(** [hangup t ~now end_ reason] hangs up the circuit of [end_], from the host. *)

type stats = { circuits : int; buffered : int; held : int }

val stats : t -> stats
