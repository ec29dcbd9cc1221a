(** The reliable-delivery scenarios [pt2pt-lossy] and [mnak-lossy]: endpoints on the deterministic
    simulator send point to point or cast over a lossy, duplicating, reordering network; the trace
    of deliveries is checked with {!Consort_spec.Fifo} (every message delivered once, in order), and
    every buffer segment must be released once the endpoints are closed. *)

val scenarios : Consort_sim.Scenario.t list
