(** One end of a virtual circuit, driven through a [trans] (the RPC's, for an end on another
    process; {!local} for the host's own end).

    Every request is idempotent (it names stream positions), so it is sent with [~idempotent:true]
    and the RPC may resend it. A reply that makes no sense (a position that goes back, or past what
    was sent) hangs the end up: a lying host cannot make it loop or lose track. An RPC that fails
    (the host is gone) hangs the end up too. *)

open Consort_cap

type trans =
  idempotent:bool -> Header.t -> string -> ((Header.t * string, Rpc_error.t) result -> unit) -> unit

type t

val create : trans -> Cap.t -> t

val local : Vc.t -> now:(unit -> Consort.Time.t) -> Cap.t -> t
(** The host's own end: requests go straight to {!Vc.handle}. *)

type event =
  [ `Data of string  (** the next bytes *)
  | `Eof  (** the other end closed its output: nothing more comes *)
  | `Intr  (** the other end sent an interrupt *)
  | `Hangup of string  (** the circuit ended, and why *) ]

val read : t -> ?max:int -> (event -> unit) -> unit
(** [read t k] calls [k] once with the next event ([max] bytes at most, default
    {!Vc_proto.max_chunk}). One read at a time.
    @raise Invalid_argument if a read is already under way. *)

val write : t -> string -> ((unit, string) result -> unit) -> unit
(** [write t s k] sends all of [s] (waiting while the other end's buffer is full) and calls
    [k (Ok ())], or [k (Error why)] if the circuit ended. One write at a time.
    @raise Invalid_argument if a write is under way. *)

val close : t -> ((unit, string) result -> unit) -> unit
(** End of this end's output (after the writes done). *)

val intr : t -> ((unit, string) result -> unit) -> unit
val hangup : t -> ((unit, string) result -> unit) -> unit

val touch : t -> unit
(** Tell the host this end is alive (an end that neither reads nor writes for the host's [silence]
    is taken for dead). If the host cannot be reached or the circuit is gone, the end hangs up
    ({!hung}). *)

val hung : t -> string option
val written : t -> int
val consumed : t -> int
