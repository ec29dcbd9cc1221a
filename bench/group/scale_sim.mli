(** How the default stack's cost grows with the group, in the simulator ([consort bench scale]): N
    members start at once and merge into one view; then 5 virtual seconds idle, 5 with every member
    casting once a second, and a crash of a member. Per member and virtual second: datagrams sent,
    Suspect's heartbeats and Mnak's status casts (stability); the virtual time to form the group and
    to install the view without the crashed member; the CPU time of each phase. The smallest size of
    the run is the baseline the others are compared with. *)

type row = {
  stack : string;
      (** ["vsync"], ["batched"] (credit and stability status every 100 ms), or ["scale"]
          ([vsync+Scale]) *)
  size : int;
  formed : float option;
      (** virtual seconds from the first start to one view of all; [None] past 120 s *)
  form_cpu : float;
  idle_datagrams : float;  (** per member and virtual second *)
  heartbeats : float;  (** Suspect's or Ringfd's, per member and virtual second *)
  load_datagrams : float;
  status : float;
      (** stability messages per member and virtual second, under load: Mnak's status casts, or
          mnak_tree's reports and root casts *)
  credits : float;  (** Mflow credit casts per member and virtual second, under load *)
  acks : float;  (** Pt2pt acknowledgements per member and virtual second, under load *)
  view_change : float option;  (** crash to the last survivor's view without it, virtual seconds *)
  steady_cpu : float;  (** CPU seconds for the 10 virtual seconds of idle and load *)
  change_cpu : float;  (** CPU seconds from the crash to the view without it *)
  slanders : int;  (** Slander casts from the crash to the view without it, all members *)
  slander_deliveries : int;  (** and their deliveries *)
}

val run : ?sizes:int list -> ?scale_sizes:int list -> ?params:Consort.Params.t -> unit -> row list
(** [run ~sizes ~scale_sizes ~params ()]: each of [sizes] (default 16, 32, 64) with the vsync stack
    and with it batched ([mflow.credit_delay] and [mnak.status_interval] at 100 ms), then each of
    [scale_sizes] (default 64, 256, 1024) with [vsync+Scale] (Ringfd, mnak_tree: row ["scale"]),
    [params] over all. Under load, at most 64 members cast, so that beyond 64 members the
    application's traffic stays the same and what grows is the stack's own. *)

val pp_table : row list Fmt.t
val to_json : row list -> string
