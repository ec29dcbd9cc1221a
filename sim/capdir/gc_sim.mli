(** The [dir-gc] scenario: a directory server and a file server; clients make, link and unlink
    directories and files while rounds of garbage collection ({!Gc.round}) run, with the collector
    dying, the file server crashing (its lifetimes start whole again) or the directory server
    restarting from its disk at a chosen touch of a round, or a server failing at ageing. Checked
    after every step: no reachable object is ever destroyed; an object unreachable through a whole
    lifetime of its server's agings is gone; each server's lifetimes follow an exact model of the
    touches and agings it answered; and after lifetime + 1 rounds without faults nothing unreachable
    is left. *)

val name : string
val doc : string

type outcome = {
  violations : string list;
  rounds : int;
  completed : int;
  collected : int;
  steps : int;
  trace_hash : string;  (** hash of the run's trace: every event, as written with [trace] *)
}

val run : ?trace:out_channel -> seed:int -> unit -> outcome

val scenarios : Consort_sim.Scenario.t list
(** [dir-gc], for the registry: rounds started as sent, rounds completed as delivered, objects
    collected as datagrams (it takes no tunables). *)
