(** A named simulation scenario, and the registries [consort sim] reads.

    A scenario builds its world on the deterministic simulator (or its own seeded model), drives a
    workload and faults from one seed, runs to the end and checks what happened. The same name,
    parameters and seed always give the same outcome and trace. Each area of the system exports its
    scenarios as one {!registry} (sim/group, sim/cap, sim/capfs, sim/kv, sim/capdir); [consort sim]
    runs them by name from the list of registries, knowing none of them. *)

type outcome = {
  seed : int;
  violations : string list;  (** empty when every check passed *)
  trace_hash : string;  (** hash of the trace of the run (network and application events) *)
  sent : int;  (** operations started: messages sent, requests, rounds *)
  delivered : int;  (** operations that completed: deliveries, acknowledged requests *)
  datagrams : int;  (** datagrams the simulated network carried (or the scenario's own count) *)
  end_time : Consort.Time.t;  (** virtual time of the last delivery *)
}

type t = {
  name : string;
  doc : string;  (** one sentence: the world, the faults, what is checked *)
  run : ?trace:out_channel -> params:Consort.Params.t -> seed:int -> unit -> outcome;
      (** one seeded run; with [trace], its events are written there one per line. It may raise (a
          seed that raises fails). *)
}

val of_names :
  names:string list ->
  describe:(string -> string option) ->
  run:(?trace:out_channel -> params:Consort.Params.t -> string -> seed:int -> outcome option) ->
  t list
(** [of_names ~names ~describe ~run] is one scenario per name, for a module that runs several by
    name.

    @raise Invalid_argument if [describe] or [run] does not know a name of [names]. *)

type registry = {
  area : string;  (** where the scenarios live, e.g. ["group"] *)
  check_params : Consort.Params.t -> (unit, string) result;
      (** whether the tunables make sense for this area's scenarios; a one-line error otherwise *)
  scenarios : t list;
}

val names : registry list -> string list
(** Every scenario's name, registry by registry, in order. *)

val find : registry list -> string -> t option

val check_params : registry list -> Consort.Params.t -> (unit, string) result
(** The first registry's refusal of the tunables, if any. *)

val duplicates : registry list -> string list
(** Names that more than one scenario claims (none in a sound list of registries). *)

type error = Unknown_scenario of { name : string; known : string list }

val pp_error : error Fmt.t
(** [pp_error] prints an error in one line. *)

val run :
  registry list ->
  ?trace:out_channel ->
  ?params:Consort.Params.t ->
  string ->
  seed:int ->
  (outcome, error) result
(** [run registries name ~seed] runs scenario [name] once; [Error] for an unknown name. *)
