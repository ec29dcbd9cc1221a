(** The clock of an engine loop, for the TCP/IP stack's protocols. *)

val of_loop : Consort_engine.Loop.t -> Consort_net.Clock.t
(** [of_loop l] reads [l]'s monotonic clock and sets timers on [l]. *)
