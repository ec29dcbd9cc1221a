(** {!Rpc} over kernel UDP, driven by a {!Consort_engine.Loop}, with the blocking calls and the
    command-line conventions of Consort's tools. *)

include module type of Rpc.Make (Consort_engine.Udp)

(** The blocking calls: each runs the node's loop until its answer is there. *)
module Sync : sig
  val trans :
    node ->
    ?idempotent:bool ->
    ?progress:([ `Sent | `Received ] -> int -> int -> unit) ->
    Header.t ->
    string ->
    (reply, Rpc_error.t) result

  val getreq : server -> request option
  val locate : node -> Port.t -> (Consort_engine.Udp.address, Rpc_error.t) result
  val std_info : node -> Cap.t -> (string, Rpc.call_error) result
  val std_status : node -> Cap.t -> (string, Rpc.call_error) result
  val std_restrict : node -> Cap.t -> Rights.t -> (Cap.t, Rpc.call_error) result
  val std_destroy : node -> Cap.t -> (unit, Rpc.call_error) result
  val std_touch : node -> Cap.t -> (unit, Rpc.call_error) result
  val std_age : node -> Cap.t -> (unit, Rpc.call_error) result
end

val default_multicast : string
(** ["239.255.67.79:7469"]: the group that servers join and clients ask when no other is configured.
*)

val open_node :
  ?config:Rpc.config ->
  ?g:Mirage_crypto_rng.g ->
  ?locate:string ->
  ?multicast:string option ->
  ?bind:string ->
  Consort_engine.Loop.t ->
  (node, string) result
(** [open_node loop] opens a node bound to [bind] (default ["0.0.0.0:0"], any port). [locate] is a
    [--locate ADDR:PORT,...] value (default: the [CONSORT_LOCATE] environment variable); [multicast]
    is the group (default: the [CONSORT_MULTICAST] environment variable, [ADDR:PORT], or [off] for
    none; if it is unset, [Some default_multicast]; [None] for none); a group that cannot be joined
    (no multicast route) is left out with a log message. Errors are one readable line. *)

val keep_memory : unit -> unit
(** [keep_memory ()] sets the process's [malloc] (glibc; elsewhere it does nothing) to serve blocks
    up to 4 MiB from its heap rather than from fresh [mmap]s, and to keep up to 64 MiB of freed
    memory rather than return it at once. The AEAD allocates new buffers for every fragment it seals
    or opens, and the buffer pools theirs: by default much of that memory went back to the system
    and was faulted in again (page faults in [consort bench rpc]: about 23,000 without, 6,400 with;
    in 300 MB of 8 KB-fragment transfers, system time 0.27 s without, 0.19 s with). For programs
    that move bulk data (Consort's [cap] tools and RPC benchmark call it); idempotent. *)
