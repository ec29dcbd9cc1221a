(** A group member as a process: [consort member].

    It joins a group over kernel UDP, prints views and deliveries, casts
    each line of its input, and leaves cleanly at the end of the input or
    on SIGTERM or SIGINT. With a log file it writes one JSON object per
    event, flushed as it goes, in the format of {!Consort_spec.Log}. *)

val default_peers : string list
(** Where members look for each other when not told: 127.0.0.1, ports
    7400 to 7415. *)

type config = {
  group : string;
  props : Consort_group.Properties.t list;
  bind : string option;  (** [None]: the first free port of {!default_peers} *)
  peers : string list;
  log : string option;
  params : Consort.Params.t;
  quiet : bool;  (** print nothing on standard output *)
  input : Unix.file_descr option;  (** lines to cast; [None]: cast nothing, stay until a signal *)
  seed : int;
  drop_file : string option;
      (** for tests of partitions: a file listing addresses (one per line)
          whose datagrams are dropped; re-read as it changes *)
  discovery : string option;  (** an IP multicast group for discovery, e.g. ["239.1.2.3:7500"] *)
}

val run : config -> (unit, string) result
(** [run cfg] runs the member until it has left the group. *)
