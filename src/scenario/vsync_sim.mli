(** Simulated scenarios of process groups with virtual synchrony.

    Members run the full [vsync] stack over the deterministic simulator,
    join, cast, send, leave, crash, are partitioned and healed, as each
    scenario says; every member's events are recorded in the member log
    format ({!Consort_spec.Log}) and checked with {!Consort_spec.Vsync},
    and at the end every live member must be in one view of exactly the
    live members. *)

type outcome = {
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  views : int;  (** view installations, summed over members *)
  end_time : Consort.Time.t;
}

val names : string list
val describe : string -> string option

val run : ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> outcome option
(** [None] if no scenario has that name. [params] override the layers'
    tunables (and the scenario's own choices of them). *)
