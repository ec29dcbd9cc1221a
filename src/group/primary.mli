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
    application's messages through.

    With [primary.mode=dynamic] the quorum follows the group instead: a view is primary when it
    holds a majority of the votes of the last primary view (exactly half is enough when it holds
    that view's least member), so a primary of five can shrink to three and then to two of those
    three, as Corosync's [last_man_standing] does. A view that formed as primary at some members but
    not at others (its last message lost in a partition) binds what follows as an ambiguous session,
    so that two components that remember different last primaries never both become primary;
    {!decide_dynamic} states the rule. No primary ever formed (a whole cluster started or restarted)
    needs every configured vote, as Corosync's [wait_for_all]; and a view that holds every
    configured vote is primary whatever its members know (no other component holds any vote): a
    member that restarted kept nothing and is not counted as its old incarnation, so when the least
    member of the last primary restarts, the others are primary again once every configured member
    is up and connected (the documented way back for an operator). *)

type session = {
  epoch : int;  (** one more than the last primary's epoch when it was attempted; the first is 1 *)
  members : (string * int) list;  (** its members' ids with their votes *)
}
(** A view that attempted to become primary under dynamic votes. *)

type knowledge = {
  last : session option;  (** the latest view known to have formed as primary *)
  ambiguous : session list;
      (** views in which this member attempted, not known to have formed or not, not older than
          [last] *)
}
(** What a member knows of past primaries under dynamic votes; kept by the group runtime across
    views, in memory (a member that restarts comes back knowing nothing, as a new member, and is not
    counted as its old incarnation in the sessions that name it). *)

val no_knowledge : knowledge
val max_ambiguous : int
val pp_session : session Fmt.t

type Consort.Event.dn_ctl +=
  | Start  (** the runtime, static votes: the view is installed, say [Here] *)
  | Start_dynamic of knowledge  (** the runtime, dynamic votes: cast what this member knows *)
  | Attempt  (** the runtime, dynamic votes: the view passed the rule, attempt it *)

type Consort.Event.up_ctl +=
  | Confirmed
        (** every member of the view said [Here] (static), or attempted it (dynamic): it is primary
        *)
  | Heard of knowledge list  (** dynamic: every member's knowledge, by rank *)

module Param : sig
  val expected : string
  (** ["primary.expected"], default 0: the votes of the whole configured group *)

  val votes : string
  (** ["primary.votes"], default [""]: [ADDR=N] items joined by [+]
      (["127.0.0.1:7400=2+127.0.0.1:7401=1"]): the votes of these addresses; others have one *)

  val mode : string
  (** ["primary.mode"], default ["static"]: [static] (a majority of the configured votes) or
      [dynamic] (a majority of the last primary view's votes) *)
end

type mode = Static | Dynamic

type basis =
  | Configured  (** the configured votes ([primary.expected]) *)
  | Last_primary of int  (** dynamic: the votes of the last primary view, of this epoch *)

type quorum = {
  primary : bool;  (** the view holds the quorum *)
  votes : int;  (** the votes of its members (dynamic: of its members in the last primary) *)
  needed : int;  (** the quorum: [expected / 2 + 1] (dynamic, no primary yet: every vote) *)
  expected : int;  (** the votes of the configured group (dynamic: of the last primary) *)
  basis : basis;
  blocking : string option;  (** dynamic: why a view is not primary, when not for its votes *)
}

val pp_quorum : quorum Fmt.t
(** ["primary (4 of 6 votes, 4 needed)"],
    ["primary (2 of the 3 votes of last primary #4, 2 needed)"] or ["not primary (...)"]. *)

type config

val config : Consort.Params.t -> (config, string) result
(** The votes and expected votes of [params]; [Error] says in one line why they do not make a quorum
    ([primary.votes] does not parse, or no vote is expected). *)

val mode : config -> mode

val decide : config -> string list -> quorum
(** [decide c addrs]: the quorum of a view whose members have these addresses, by static votes. *)

val decide_dynamic : config -> members:(string * string) list -> knowledge list -> quorum * session
(** [decide_dynamic c ~members ks]: the decision on a view whose members (id, address) know [ks],
    under dynamic votes, and the session it attempts if it passes. Let [top] be the highest epoch of
    a last primary in [ks]. The view passes when it holds a majority of the votes of every last
    primary of epoch [top] in [ks] and of every ambiguous session of epoch [top] or later in [ks]
    (exactly half when it holds the session's least member by id); with no last primary in [ks], or
    whatever [ks] holds, when it holds every configured vote ([primary.expected] must count every
    member's votes, as for the first primary). A member holding {!max_ambiguous} unresolved attempts
    blocks it. Every member of the view computes the same result from the same [ks]. *)

val learn : knowledge -> knowledge list -> knowledge
(** [learn own ks]: [own] after hearing [ks]: the latest last primary known to any, and the
    ambiguous sessions of [own] not older than it. *)

val name : string
val layer : Consort.Layer.t
