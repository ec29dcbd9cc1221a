(** Consort inside Lwt's main loop: a {!Consort_engine.Loop} driven by [Lwt_engine], with no thread
    and no polling.

    {[
      let loop = Consort_engine.Loop.create () in
      let attached = Consort_lwt.attach loop in
      (* join groups on [loop] as usual, then run any Lwt program: *)
      Lwt_main.run (my_lwt_program ());
      Consort_lwt.detach attached
    ]}

    Consort's callbacks (views, deliveries) run from Lwt's loop, between Lwt's own callbacks; they
    must not block, as always. From them, wake Lwt code with [Lwt_condition], [Lwt_mvar] or
    [Lwt.wakeup]. *)

type t

val attach : Consort_engine.Loop.t -> t
(** [attach loop] watches [loop]'s descriptor with [Lwt_engine] and keeps one Lwt timer at [loop]'s
    next deadline; whenever either fires, {!Consort_engine.Loop.step} runs. [loop] must not also be
    {!Consort_engine.Loop.run}. *)

val detach : t -> unit
(** Stops driving the loop (its descriptor and timer are released from Lwt's engine; the loop itself
    is untouched). *)

val steps : t -> int
(** How many times the loop was stepped: what it cost Lwt's loop. *)

val wait : t -> (unit -> bool) -> unit Lwt.t
(** [wait t cond] resolves once [cond ()] is [true], checked after each step: for Lwt code waiting
    on what Consort's callbacks record. *)
