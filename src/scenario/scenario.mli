(** Named simulation scenarios, checked by the executable specifications.

    A scenario builds endpoints on the deterministic simulator, drives an application workload and
    network faults from one seed, runs to quiescence, and checks the recorded trace. The same name
    and seed always give the same trace. *)

type outcome = {
  seed : int;
  violations : string list;  (** empty when every check passed *)
  trace_hash : string;  (** hash of the network trace and the application events *)
  sent : int;  (** application messages sent *)
  delivered : int;  (** application deliveries *)
  datagrams : int;  (** datagrams the simulated network carried *)
  end_time : Consort.Time.t;  (** virtual time of the last delivery *)
}

val names : string list
val describe : string -> string option

type error = Unknown_scenario of { name : string; known : string list }

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> (outcome, error) result
(** [run name ~seed] runs scenario [name] once. [Error] for an unknown name. With [trace], the
    network and application events are written there, one per line. [params] override layer tunables
    (the scenario's own settings included). *)
