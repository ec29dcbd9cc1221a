(** A replica as a process: the group over kernel UDP, clients over TCP,
    one event loop. *)

type config = {
  group : string;
  data : string;  (** the store's directory *)
  bind : string;  (** group address, [ADDR:PORT] *)
  peers : string list;  (** the other replicas' group addresses *)
  listen : string;  (** where clients connect, [ADDR:PORT] *)
  params : Consort.Params.t;
  max_connections : int;
}

val run : ?on_ready:(unit -> unit) -> config -> (unit, string) result
(** [run cfg] opens the store (printing what recovery found, one line each,
    on standard error), joins the group, serves clients until SIGTERM or
    SIGINT, then leaves the group. *)

val parse_addr : string -> (Unix.sockaddr, string) result
(** [parse_addr "127.0.0.1:7000"]. *)
