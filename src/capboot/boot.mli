(** The boot server: starts a host's services ({!Decl}) in dependency order, watches them (their
    process, and [std_status] on their capability), restarts what fails with back-off, and reports
    every service's state.

    A service's first line is [server CAP]; lines [WORD CAP] naming other capabilities (at most 4,
    such as a directory replica's [root CAP]) may come before it.

    States: [cold] (not started: waiting for its dependencies to be up), [starting] (running, not
    yet up: a service with a capability is up once it printed [server CAP] and answered a
    [std_status]; one without, once it ran for a second), [up], [restarting] (ended or stopped
    answering; waiting its back-off), [down] (ended and not to be restarted, or could not be started
    and its policy says never).

    A service that exits, does not come up within its start timeout, or fails 3 [std_status] polls
    in a row is stopped (SIGKILL) and, as its [restart] policy says, restarted after [MIN * 2^(n-1)]
    seconds (at most MAX), [n] counting the failures since it was last up for 10 s. *)

type state = Cold | Starting | Up | Down | Restarting

val state_name : state -> string

type t

val create :
  ?log_dir:string ->
  ?on_change:(string -> state -> string -> unit) ->
  Consort_engine.Loop.t ->
  Consort_cap.Rpc_udp.node ->
  Decl.service list ->
  t
(** [on_change name state detail] is called at every change of state. The services' standard error
    and output (after the capability line) go to [LOG_DIR/NAME.log] (default: /dev/null). Nothing
    starts before {!start}. *)

val start : t -> unit

val status : t -> string
(** One line per service: name, state, pid, restarts, and the last reason. *)

val states : t -> (string * state) list

val capabilities : t -> (string * string * string * Consort_cap.Cap.t option) list
(** [capabilities t]: for each service in order, its name, state, ["server"] and the capability it
    printed on its [server CAP] line ([None] while it has none; ["none"] and [None] for a service
    declared [capability none]), then one row for each other capability it printed before that line
    ([root CAP]: ["root"]). The service logs hold a digest of these, never the capabilities
    ({!Consort_cap.Cap.digest}). *)

val capability : t -> string -> Consort_cap.Cap.t option
(** The capability the service printed ([server CAP]) in its current run. *)

val pid : t -> string -> int option
(** The process of the service's current run. *)

val hold : t -> string -> bool -> unit
(** [hold t name true]: the service is not restarted until [hold t name false] (a restart whose
    back-off ended meanwhile happens then): for maintenance, or to show a system working without it.
*)

val stop : t -> unit
(** Stops every service, dependents first: SIGTERM, then SIGKILL after 5 s. Blocks until they are
    gone. *)
