(** Simulated scenarios of process groups with virtual synchrony.

    Members run the full [vsync] stack over the deterministic simulator, join, cast, send, leave,
    crash, are partitioned and healed, as each scenario says; every member's events are recorded in
    the member log format ({!Consort_spec.Log}) and checked with {!Consort_spec.Vsync}, and at the
    end every live member must be in one view of exactly the live members. *)

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  views : int;  (** view installations, summed over members *)
  end_time : Consort.Time.t;
}

val check_params : Consort.Params.t -> (unit, string) result
(** Whether the tunables make sense for a scenario ([sim.props], the property set of the vsync-*
    scenarios' stack, names joined by [+]; [total.protocol]): a one-line error otherwise. *)

val names : string list
val describe : string -> string option

val run : ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> outcome option
(** [None] if no scenario has that name. [params] override the layers' tunables (and the scenario's
    own choices of them). *)

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)

val scenarios_of :
  names:string list ->
  describe:(string -> string option) ->
  run:(?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> outcome option) ->
  Consort_sim.Scenario.t list
(** The scenarios of a module that runs them by name with this module's outcome. *)

(** {1 Building blocks for scenarios in other modules} *)

type world
(** One simulated network with its processes, their member logs and counts. *)

val make :
  ?trace:out_channel ->
  ?params:Consort.Params.t ->
  ?props:Consort_group.Properties.t list ->
  seed:int ->
  n:int ->
  link:Consort_engine.Sim.link ->
  unit ->
  world
(** [n] processes [p0] ... on a network whose links are all [link]; the stack of [props] (default:
    the tunable [sim.props] of [params], itself [vsync] by default; ordering properties it adds,
    such as [Total], are then checked by {!finish} too). With [Xfer], the logs are checked after
    {!Consort_spec.Xfer.normalize}. With [Auth], [Privacy] or [Rekey], the members seal their
    datagrams ({!Consort_seal.Seal}, one secret, keys drawn from [seed]), with per-view keys unless
    [seal.rekey=false] (and [Rekey] not asked). *)

type hooks = {
  take : int -> string -> string;
  install : int -> string -> string -> unit;
  applied : int -> string -> view:string -> [ `Cast | `Send ] -> origin:string -> string -> unit;
  viewed : int -> string -> Consort_group.Group.view_info -> unit;
  stack_error : int -> string -> Consort_group.Group.stack_error -> unit;
}
(** What the applications do with their state: [take i id] is the snapshot of process [i], member
    [id]; [install i id s] installs one; [applied i id ~view kind ~origin s] is a delivery handed to
    the application (in [view], see {!Consort_group.Group.Make.delivery_view}); [viewed i id v] a
    view installed; [stack_error i id e] a partition on another stack. *)

val no_hooks : hooks
(** Hooks that do nothing (and a snapshot that is empty). *)

val set_hooks : world -> hooks -> unit

val group :
  world -> int -> Consort_group.Group.Make(Consort_seal.Seal.Make(Consort_engine.Sim)).t option
(** The member process [i] runs, if it is alive. *)

val crashed : world -> string list
(** The members crashed so far. *)

val lossy : float -> Consort_engine.Sim.link
(** A link that loses and reorders this fraction of datagrams, with 2 ms of jitter. *)

val at : world -> Consort.Time.t -> (unit -> unit) -> unit

val on_block : world -> (int -> unit) -> unit
(** [on_block w f]: from now on, [f i] runs when the member of process [i] is blocked (a view change
    starts there), after its [block] line is logged; it replaces the function given before. *)

val start : ?layers:Consort.Layer.t list -> ?params:Consort.Params.t -> world -> int -> unit
(** [start w i]: a new incarnation of process [i] joins the group (on the world's stack, or on
    [layers], with [params] over the world's). *)

val crash : world -> int -> unit

val workload : world -> from:Consort.Time.t -> until:Consort.Time.t -> count:int -> unit
(** Casts and a few sends from random live members at random times. *)

val note : world -> ('a, unit, string, unit) format4 -> 'a
(** A line in the trace, if any. *)

val problem : world -> string -> unit
(** Fails the run with this violation. *)

val finish :
  ?extra:string list ->
  ?checks:((string * Consort_spec.Log.event list) list -> string list) list ->
  world ->
  outcome
(** Checks the logs with {!Consort_spec.Vsync} and [checks], and that the live members end in one
    view of exactly them. *)

val evs : (string * Consort_spec.Log.event list) list -> string list
(** {!Consort_spec.Evs} over the logs (members started with the [Evs] property log their
    transitional views), one line per violation. *)

val params : world -> Consort.Params.t
(** The tunables the members run with. *)

val net : world -> Consort_engine.Sim.t
val rng : world -> Consort.Rng.t
val nprocs : world -> int
val addr : world -> int -> string

val views : world -> int
(** View installations so far, summed over members. *)

val member : world -> int -> (string * Consort.Stack.t) option
(** The member id and current stack of process [i], if it is alive and in a view. *)

val addr_of_member : world -> string -> string option

val cast : ?size:int -> world -> int -> unit
(** [cast w i]: process [i], if alive, casts a unique payload (of [size] bytes, or a random length).
*)

val leave : world -> int -> unit
(** Process [i], if alive, leaves the group. *)

val is_alive : world -> int -> bool

val not_wedged : world -> string list
(** A violation for each live member that is blocked. *)

val with_params : world -> (string * Consort.Params.value) list -> world
(** The scenario's own tunables, under those given on the command line. *)
