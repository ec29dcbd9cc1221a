(** Time and timers for the TCP/IP stack's protocols.

    Protocols own no clock: they are given a [t] at creation. The real engine's loop provides one
    ([of_loop] in [consort.net.unix]); tests use [virtual_] and advance it by hand, so a whole TCP
    transfer runs deterministically in virtual time. *)

type cancel = unit -> unit

type t = {
  now : unit -> Consort.Time.t;
  at : Consort.Time.t -> (unit -> unit) -> cancel;
      (** [at time f] calls [f] once at or after [time]; the result cancels it *)
}

(** A clock that moves only when told to. *)
module Virtual : sig
  type clock

  val create : unit -> clock
  val clock : clock -> t

  val advance : clock -> Consort.Time.t -> unit
  (** [advance c d] moves time forward by [d], running every timer due, in time order (timers set by
      timers run too if due). *)

  val run_until_idle : ?limit:Consort.Time.t -> clock -> unit
  (** [run_until_idle c] jumps from timer to timer until none is left or [limit] (absolute) is
      reached. *)

  val next : clock -> Consort.Time.t option
end
