(** A replica as a process: the group over kernel UDP, clients over TCP, one event loop. A client
    may pipeline requests on one connection (the answers carry the request number; at most 32 under
    way per connection, the rest wait in TCP until answers go out). *)

type config = {
  group : string;
  data : string;  (** the store's directory *)
  bind : string;  (** group address, [ADDR:PORT] *)
  peers : string list;  (** the other replicas' group addresses *)
  listen : string;  (** where clients connect, [ADDR:PORT] *)
  params : Consort.Params.t;  (** over {!default_params} *)
  max_connections : int;
  init : Store.init;  (** [New], [Join] for an empty data directory; [Existing] otherwise *)
}

val default_params : string
(** ["suspect.timeout=2s,suspect.verify=500ms"]: a dead replica blocks writes until the failure
    detector excludes it (about [suspect.timeout]), so the replica's is shorter than the group's 5 s
    default (etcd's leader election waits 1 s by default). A false suspicion (a pause longer than
    that) costs a view change and a catch-up, never correctness. *)

val run : ?on_ready:(unit -> unit) -> config -> (unit, string) result
(** [run cfg] opens the store (printing what recovery found, one line each, on standard error),
    joins the group, serves clients until SIGTERM or SIGINT, then leaves the group. [Error] (one
    line) when the data directory is refused (another group or cluster, empty without [New] or
    [Join]), and when the disk refuses a write, an fsync or a rename: the replica then stops
    acknowledging, refuses its clients ([disk full], [io-error: ...]), leaves the group and returns
    (the command exits 2). *)

val max_pipeline : int
(** [32]: the requests a connection may have under way; the server reads no more of it meanwhile. *)

val parse_addr : string -> (Unix.sockaddr, string) result
(** [parse_addr "127.0.0.1:7000"]. *)
