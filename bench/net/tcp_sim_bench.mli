(** TCP on the in-memory network (virtual time, no device, no root): connection setup rate and
    memory per connection, bulk throughput under 1% loss with NewReno and with CUBIC, with RACK-TLP
    and without, and the cost of an ACK from a receiver that abuses SACK, with the bounded
    scoreboard beside an unbounded one. Every figure and its baseline come from the same run. *)

type setup = {
  connections : int;
  setup_per_sec : float;  (** handshakes completed per second of CPU (both ends) *)
  bytes_per_conn : int;  (** heap growth per established connection, both stacks *)
  accounted_per_conn : int;  (** the listener's {!Tcp.stats} memory per connection *)
}

type flow = {
  name : string;
  mbytes_per_sec : float;  (** in virtual time *)
  retransmitted : int;
  timeouts : int;
  probes : int;  (** tail loss probes sent *)
  cpu_s : float;
}

type sack = { blocks : int; bounded_ns : float; unbounded_ns : float }
(** Nanoseconds per ACK carrying four new SACK blocks, on a scoreboard already holding [blocks]
    reported blocks. *)

type rack = { bulk_on : flow; bulk_off : flow; short_on : flow; short_off : flow }
(** Throughput under 1% loss with RACK-TLP and without (duplicate ACKs and the RTO): one long
    transfer, and many short ones (where a tail loss weighs most). *)

type report = { setup : setup; flows : flow list; rack : rack; sack : sack }

val run : ?connections:int -> ?bytes:int -> unit -> report
val pp : report Fmt.t
val to_json : report -> string
