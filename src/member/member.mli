(** A group member as a process: [consort member].

    It joins a group over kernel UDP, prints views and deliveries, casts each line of its input, and
    leaves cleanly at the end of the input or on SIGTERM or SIGINT. With a log file it writes one
    JSON object per event, flushed as it goes, in the format of {!Consort_spec.Log}.

    With a log, each cast's payload is ["#SEQ "] followed by the line, SEQ numbering the member's
    messages from 1, so that logs name messages by origin and number; members strip the number from
    what they print and log. Without a log, the payload is the line. *)

val default_peers : string list
(** Where members look for each other when not told: 127.0.0.1, ports 7400 to 7415. *)

(** Where the lines to cast come from. *)
type input =
  | No_input  (** cast nothing; stay until a signal *)
  | Fd of Unix.file_descr
      (** a pipe, terminal or socket is watched; a regular file is read directly (epoll refuses it);
          [/dev/null] and other descriptors that cannot be watched are not read (as [No_input]) *)

type config = {
  group : string;
  props : Consort_group.Properties.t list;
  bind : string option;  (** [None]: the first free port of {!default_peers} *)
  peers : string list;
  log : string option;
  params : Consort.Params.t;
  quiet : bool;  (** print nothing on standard output *)
  input : input;
  seed : int;
  drop_file : string option;
      (** for tests of partitions: a file listing addresses (one per line) whose datagrams are
          dropped; re-read as it changes *)
  discovery : string option;  (** an IP multicast group for discovery, e.g. ["239.1.2.3:7500"] *)
  seal : (Consort_seal.Seal.secret * Consort_seal.Seal.mode) option;
      (** the group's secret and whether datagrams are authenticated or also encrypted
          ({!Consort_seal.Seal}); [None]: in clear *)
  control : string option;  (** a Unix socket path for {!Consort_ops.Control} *)
  metrics : string option;  (** ["ADDR:PORT"] where Prometheus metrics are served over HTTP *)
  http : string option;
      (** ["ADDR:PORT"] where the web console ({!Consort_ops.Console}) is served, with the last
          {!Consort_ops.Console.default_max} views and why each changed *)
  pcap : string option;
      (** a pcap file of every datagram sent and received ({!Consort_ops.Capture}) *)
}

(** Why a member cannot run. *)
type error =
  | Bad_props of string
  | Bad_params of string  (** a tunable with a value its layer refuses ([total.protocol]) *)
  | Bad_peer of { peer : string; reason : string }  (** an address that does not parse *)
  | Bad_bind of { addr : string; reason : string }
      (** an address peers cannot reach: wildcard, broadcast, multicast, port 0, or one that does
          not parse *)
  | Unreachable_bind of { addr : string; peer : string }
      (** a loopback address, with a peer on another host *)
  | Log_file of string
  | No_free_port
  | Join of Consort_group.Group.join_error
      (** the group could not be joined (the address is in use, ...) *)
  | Control of string  (** the control socket cannot be opened *)
  | Metrics of string  (** the metrics port cannot be opened *)
  | Http of string  (** the console's port cannot be opened *)
  | Pcap of string  (** the capture file cannot be created *)
  | Failed of string
      (** the member stopped while running: its log, its capture or standard output could not be
          written (a full disk, an I/O error), or a callback raised; it left the group *)

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

val check_config : config -> (unit, error) result
(** [check_config cfg] checks the addresses of [cfg] ({!run} does it first). *)

val run : config -> (unit, error) result
(** [run cfg] runs the member until it has left the group. Fail-stop: the first write to the log,
    the capture or standard output that fails stops everything else (nothing more is cast or
    written), the member leaves the group cleanly, and [run] returns [Error (Failed _)]. *)

val log_context : unit -> (string * string) list
(** What is known now of the member {!run} runs: [group], then, from its first view, [member] (its
    id) and [view] (the current view's id): the fields of its JSON log records. *)
