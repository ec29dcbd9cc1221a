(** Primary: a primary component with quorum (property [Primary]), as Corosync's votequorum states
    it with static weights. Each member has a number of votes, given by its address
    ([primary.votes], one vote for an address not listed); [primary.expected] is the votes of the
    whole configured group (raised to the sum of the listed votes if below it). A view is
    {e primary} when the votes of its members reach the quorum, [expected / 2 + 1]: a strict
    majority of the configured votes, so two views that are primary always share a member, and no
    two disjoint components are ever primary together.

    Every member computes the decision from the view's agreed membership and the configuration,
    which is part of the stack's identity (members configured otherwise never merge): every member
    of a view decides the same. The group runtime tells the application ({!Group.Make.join}
    [~primary]) and refuses casts in a view that is not primary ([Not_primary]); casts accepted
    during a view change that ends in a view that is not primary are reported lost. So total order
    ([Total]) and state machines above it serve writes only in the primary component, and a
    partition that heals merges back into a primary view (one that holds the quorum again).

    A view whose members hold the quorum is primary only once every member is known to have
    installed it: at the start of each view every member casts a [Here] (on {!Start}, which the
    runtime sends), and the layer emits {!Confirmed} once it has every member's. A coordinator that
    installs a view naming members that went elsewhere (a merge that timed out on their side) thus
    never counts them. The layer carries the property and its tunables in the stack, and passes the
    application's messages through. *)

type Consort.Event.dn_ctl += Start  (** the runtime: the view is installed, say [Here] *)
type Consort.Event.up_ctl += Confirmed  (** every member of the view said [Here] *)

module Param : sig
  val expected : string
  (** ["primary.expected"], default 0: the votes of the whole configured group *)

  val votes : string
  (** ["primary.votes"], default [""]: [ADDR=N] items joined by [+]
      (["127.0.0.1:7400=2+127.0.0.1:7401=1"]): the votes of these addresses; others have one *)
end

type quorum = {
  primary : bool;  (** the view holds the quorum *)
  votes : int;  (** the votes of its members *)
  needed : int;  (** the quorum: [expected / 2 + 1] *)
  expected : int;  (** the votes of the configured group *)
}

val pp_quorum : quorum Fmt.t
(** ["primary (4 of 6 votes, 4 needed)"] or ["not primary (...)"]. *)

type config

val config : Consort.Params.t -> (config, string) result
(** The votes and expected votes of [params]; [Error] says in one line why they do not make a quorum
    ([primary.votes] does not parse, or no vote is expected). *)

val decide : config -> string list -> quorum
(** [decide c addrs]: the quorum of a view whose members have these addresses. *)

val name : string
val layer : Consort.Layer.t
