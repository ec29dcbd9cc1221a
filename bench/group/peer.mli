(** The processes of the round-trip and throughput benchmarks ([consort bench peer]): each runs one
    side of a measurement and ends with a result line on its standard output.

    Kinds:
    - [group-rtt]: a member of a two-member group with the [vsync] stack, each in its own process
      with its own {!Consort_engine.Loop}; index 0 casts 16 bytes, index 1 casts them back on
      delivery, index 0 times the round trip;
    - [engine-rtt]: the same ping-pong as datagrams over {!Consort_engine.Udp} and a loop, with no
      layers;
    - [raw-rtt]: the same over blocking kernel UDP sockets;
    - [group-tput]: a member of a group; the first [senders] members (with [not_sequencer], the
      members of the [senders] highest ranks) cast [count] messages of [size] bytes each, as fast as
      flow control lets them, and every member checks every delivery (origin, order, content);
    - [raw-tput]: index 0 sends [count] datagrams of [size] bytes to each other index over blocking
      sockets, with no flow control; the others count what they receive. *)

type kind = Group_rtt | Engine_rtt | Raw_rtt | Group_tput | Raw_tput

val kind_of_string : string -> (kind, string) result
val kind_to_string : kind -> string

type config = {
  kind : kind;
  index : int;  (** this process's place in [addrs] *)
  addrs : string list;  (** every process's ["127.0.0.1:PORT"] *)
  count : int;  (** round trips measured, or messages per sender *)
  warmup : int;  (** round trips made before measuring *)
  size : int;  (** bytes per message (throughput) *)
  senders : int;  (** members that cast (group throughput) *)
  not_sequencer : bool;
      (** group throughput: the members that cast are those of the [senders] highest ranks of the
          view of all, not the first [senders] of [addrs]: rank 0 (Total's sequencer) casts only
          when every member does *)
  deadline : float;  (** seconds after which the process gives up *)
  params : Consort.Params.t;  (** tunables of the group stack *)
  props : string;
      (** the property set of the group's stack (group-tput): [vsync], [vsync,Total], ... *)
}

val run : config -> (string, string) result
(** [run cfg] plays its part and returns the result line: ["result"] followed by [key=value] pairs
    with no spaces in values. *)

val parse_result : string -> (string * string) list option
(** [parse_result line] is the pairs of a result line, or [None] if [line] is not one. *)

val ping_msg : int -> string
(** [ping_msg seq] is the 16-byte message of round trip [seq]: ["p"] and [seq] in 15 digits. *)

val payload : seq:int -> size:int -> string
(** [payload ~seq ~size] is the [size]-byte message number [seq] of the throughput benchmarks (at
    least 11 bytes: ['d'], ten digits, filler that depends on [seq]). *)

val payload_into : Bytes.t -> seq:int -> size:int -> unit
(** [payload_into b ~seq ~size] writes [payload ~seq ~size] into the first [size] bytes of [b].
    @raise Invalid_argument if [size] is below 11, [seq] outside 0 to 9,999,999,999 or [b] shorter.
*)

val check_payload_cs : Cstruct.t -> size:int -> int option
(** The same on a view of received bytes, without copying them. *)

val check_payload : string -> size:int -> int option
(** [check_payload s ~size] is the number of message [s] if it is exactly [payload ~seq ~size] for
    some [seq]. *)
