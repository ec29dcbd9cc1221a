(** consortd: one daemon per machine holding the group stacks of its local clients, who connect over
    a Unix socket (or TCP on loopback) and speak {!Wire} (see doc/protocol.md).

    Each JOIN makes a member over real UDP ({!Consort_group.Group} on {!Consort_engine.Udp}, sealed
    with the daemon's key if it has one), bound to the first free port of the daemon's range. A new
    member looks for the group's other members at the daemon's peers (its [--peers], or the
    client's) and at the other members of that group on this daemon.

    A client with more than half of [max_queue] bytes unread is slowed: its members get FLOW 1 and
    their casts and sends are refused with [flow-control] until it has less than a quarter unread,
    when FLOW 0 follows (doc/protocol.md, "Backpressure").

    A client that closes its connection, dies mid-frame, sends bytes that do not decode, goes over
    the frame limit, or lets more than [max_queue] bytes of upcalls wait unread is failed out (so
    is, when all clients together leave more than [max_queued] bytes unread, the one that leaves the
    most): its members leave their groups (a clean leave; the others install a view without them),
    and its connection is closed. Nothing a client sends or fails to read reaches another client or
    raises out of the daemon. *)

type config = {
  socket : string option;  (** a Unix socket path *)
  socket_mode : int;  (** its mode, whatever the umask (default [0o660]) *)
  allow_uids : int list;
      (** who may connect to the Unix socket, by the peer's uid (SO_PEERCRED): root and the daemon's
          own user always may; default: the daemon's uid *)
  allow_gids : int list;
      (** ... or by a group of the peer, its primary or a supplementary one; default: the daemon's
          gid *)
  tcp : string option;  (** ["127.0.0.1:PORT"]: TCP on loopback *)
  token : string option;
      (** what a client over TCP must present in HELLO ({!read_token}); required with [tcp] and
          [seal] *)
  bind : string;  (** ["IP:PORT"]: the first UDP port of the members' range *)
  ports : int;  (** the size of that range *)
  peers : string list;  (** ["IP:PORT"] or ["IP:PORT-PORT"] *)
  seal : (Consort_seal.Seal.secret * Consort_seal.Seal.mode) option;
  max_frame : int;  (** the largest frame body accepted *)
  max_queue : int;  (** bytes of upcalls a client may leave unread *)
  max_queued : int;
      (** bytes of upcalls all clients together may leave unread: over it, the client that leaves
          the most is failed out *)
  max_clients : int;
  max_members : int;  (** per client *)
  hello_timeout : float;  (** seconds a new connection has to say HELLO *)
  spin_us : int;
      (** microseconds the loop polls before it sleeps (0: none); see
          {!Consort_engine.Loop.set_spin} *)
  spin_yield : bool;  (** while it polls, the loop yields the CPU between two polls *)
  control : string option;
      (** a Unix socket where [consort status], [consort counters], [consort cast], [consort send]
          ask (see {!control_answer}) *)
  metrics : string option;
      (** ["IP:PORT"]: Prometheus metrics over HTTP, at [/metrics]; an address other than loopback
          needs [metrics_public] *)
  metrics_public : bool;
      (** the metrics name groups and members (which Privacy hides on the wire): serving them on an
          address other than loopback is refused without it *)
  http : string option;
      (** ["IP:PORT"]: the web console ({!Consort_ops.Console}) of every member held, at [/], its
          data at [/api/status]; port 0 picks one, logged as ["console at http://IP:PORT/"]; an
          address other than loopback needs [http_public] *)
  http_public : bool;
  pcap : string option;
      (** a pcap file of every datagram the members send and receive ({!Consort_ops.Capture}) *)
}

val default : config
(** No socket (mode 0660, the daemon's uid and gid allowed), no token, UDP from 127.0.0.1:7500 (32
    ports), frames up to 1 MiB + 1 KiB, 8 MiB of queue per client and 64 MiB for all, 256 clients,
    64 members each, 10 s to say HELLO. *)

val read_token : string -> (string, string) result
(** A token file ([consortd --token]): {!Consort_seal.Seal.read_private}'s checks, then its text
    without surrounding blanks, of at least 16 bytes ([consort keygen FILE] writes one). *)

val parse_peers : ?max_peers:int -> string list -> (string list, string) result
(** Expands ["IP:PORT-PORT"] ranges (at most [max_peers], default 1024, addresses in all); one line
    per error. A client's JOIN may name at most 64. *)

type t

val create : Consort_engine.Loop.t -> config -> (t, string) result
(** Checks [config], listens, and serves clients on the loop. *)

val adopt : t -> Unix.file_descr -> unit
(** [adopt t fd] serves a connected stream socket as a client (for tests and fuzzing: a socketpair),
    with no check of who it is. *)

val close : t -> on_done:(unit -> unit) -> unit
(** Stops accepting, fails every client out (their members leave), and calls [on_done] once every
    member has exited (or after 5 s). *)

val clients : t -> int
val members : t -> int

val stats : t -> (string * int) list
(** Counters: clients accepted and failed (by reason), frames, bytes. *)

val control_answer : ?only:string -> t -> string -> Yojson.Safe.t
(** The answer of the control socket ([--control]) to one request line, as {!Consort_ops.Control}'s
    for a member, over every member the daemon holds:

    {v
    status                  {"daemon":{"clients":N,"members":N,"queued":N},"members":[STATUS,...]}
    counters                {"daemon":{COUNTER:N,...},"members":[{"group":G,"me":ID,"counters":{LAYER:{COUNTER:N,...},...}},...]}
    cast TEXT               {"ok":true} or {"error":REASON}
    send ID TEXT            {"ok":true} or {"error":REASON}
    suspect ID[,ID...]      {"ok":true} or {"error":REASON}
    group NAME REQUEST      REQUEST for the members of group NAME only
    v}

    STATUS is a member's [status] answer with its client's number and handle added. A cast, send or
    suspect goes through the first member the daemon holds in the group whose client keeps no member
    log (JOIN flag REPORT: the message would be missing from that log; with none, it is refused),
    and needs [group NAME] when the daemon holds members of several groups. Its client hears the
    message as any other member does. [only] is [group NAME]'s name. *)

val log_context : unit -> (string * string) list
(** The fields of the log record being written ([Consort_cli.set_log_context]): those of the member
    whose code runs now, for a record made on its behalf (its group library's, while it handles a
    datagram or a timer; the daemon's operations on it: JOIN, LEAVE, CAST, a control socket's cast,
    its leave when its client is failed out): [member] (its id, once it has one), [group] and [view]
    (its current view's id), as [consort member]'s; none for the daemon's own records (clients
    accepted, failed out, refused). *)

val outside_members : (unit -> 'a) -> 'a
(** [outside_members f] is [f ()] with no member's log context: for the daemon's own records. *)

val run : config -> (unit, string) result
(** [run config] serves until SIGTERM or SIGINT, then leaves cleanly. Fail-stop: when the capture
    ([--pcap]) cannot be written (a full disk, an I/O error) or a loop callback raises, it stops the
    same way and returns the reason as [Error] (exit 2). On SIGUSR1 it prints one line on standard
    error: [counters clients=N members=N] and {!stats} as [NAME=VALUE]. *)
