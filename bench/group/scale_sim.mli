(** How the default stack's cost grows with the group, in the simulator ([consort bench scale]): N
    members start at once and merge into one view; then 5 virtual seconds idle, 5 with every member
    casting once a second, and a crash of a member. Per member and virtual second: datagrams sent,
    Suspect's heartbeats and Mnak's status casts (stability); the virtual time to form the group and
    to install the view without the crashed member; the CPU time of each phase. The smallest size of
    the run is the baseline the others are compared with. *)

type row = {
  stack : string;  (** ["vsync"], or ["batched"]: credit and stability status every 100 ms *)
  size : int;
  formed : float option;
      (** virtual seconds from the first start to one view of all; [None] past 120 s *)
  form_cpu : float;
  idle_datagrams : float;  (** per member and virtual second *)
  heartbeats : float;  (** per member and virtual second *)
  load_datagrams : float;
  status : float;  (** Mnak status casts per member and virtual second, under load *)
  credits : float;  (** Mflow credit casts per member and virtual second, under load *)
  acks : float;  (** Pt2pt acknowledgements per member and virtual second, under load *)
  view_change : float option;  (** crash to the last survivor's view without it, virtual seconds *)
  steady_cpu : float;  (** CPU seconds for the 10 virtual seconds of idle and load *)
  change_cpu : float;  (** CPU seconds from the crash to the view without it *)
}

val run : ?sizes:int list -> ?params:Consort.Params.t -> unit -> row list
(** [run ~sizes ~params ()]: each size (default 16, 32, 64) with the vsync stack and with it batched
    ([mflow.credit_delay] and [mnak.status_interval] at 100 ms), [params] over both. *)

val pp_table : row list Fmt.t
val to_json : row list -> string
