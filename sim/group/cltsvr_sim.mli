(** Simulated scenario of client-server groups ({!Consort_group.Cltsvr}): servers on [vsync+Total]
    and clients that are not in their view. It checks that every server delivers each session's
    requests 1, 2, ... with the client's payloads, at most once, the same at every live server (a
    crashed server's a prefix), every request of a client that stayed delivered; that notifications
    are numbered alike at every live server and heard by each client in that order, each once,
    losses told, all heard by a client that stayed; that at the end the servers hold exactly the
    sessions of the clients that stayed (crashed ones and the one that said bye forgotten), that a
    client cut off past the timeout is told its session expired and no other is, and that the
    servers end in a view of the live servers only. *)

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;  (** requests made *)
  delivered : int;  (** requests delivered, summed over the live servers *)
  datagrams : int;
  end_time : Consort.Time.t;
  view_change : Consort.Time.t option;
      (** from the crash of a server to the survivors' view without it *)
  flush : Consort.Time.t option;
      (** from the first block at a survivor after the crash to the last install *)
}

val run_world :
  ?trace:out_channel ->
  ?params:Consort.Params.t ->
  seed:int ->
  nservers:int ->
  nclients:int ->
  requests:int ->
  loss:float ->
  crash_server:bool ->
  ?cut_coord:bool ->
  crash_clients:int ->
  pause_client:bool ->
  unit ->
  outcome
(** One run: [nservers] servers, [nclients] clients making [requests] requests each at random times,
    links losing [loss] of the datagrams; one server crashes if [crash_server], [crash_clients]
    clients crash, one client says bye (with more than 3 clients), and one is cut off past the
    timeout if [pause_client] (with more than 4). With [cut_coord], the coordinator's datagrams to
    the other servers are lost from a random time, its clients send it a request each, and it
    crashes 20 ms after it delivered one of them. *)

val names : string list
val describe : string -> string option
val run : ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
