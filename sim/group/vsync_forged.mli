(** The [vsync-forged] scenario: a running group under a stream of forged datagrams from a
    stranger's address, each crafted to be told from the truth by the receiver (numbers beyond any
    window or impossible, [max_int], varints that overflow, wrong group stamps or origins, NAK
    storms, statuses claiming casts never made, truncated headers). The run passes when the
    {!Consort_spec.Vsync} checker and the final view agree as in {!Vsync_sim}, Mnak and Pt2pt
    buffers stay under fixed bounds, NAKs and statuses stop within 3 s of the attack's end and of
    the last view change, and every kind of rejection was counted.

    Forgeries that carry plausible numbers (a cast within the window, an acknowledgement of messages
    really sent) cannot be told from the truth without authenticating datagrams, and are not
    injected. *)

val names : string list
val describe : string -> string option

val run :
  ?trace:out_channel -> ?params:Consort.Params.t -> string -> seed:int -> Vsync_sim.outcome option

val scenarios : Consort_sim.Scenario.t list
(** The scenarios of {!names}, for the registry. *)
