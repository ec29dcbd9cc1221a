(** The identity of a group's stack: its layers, top first, and the values of their tunables (every
    registered tunable named after one of its layers, ["frag.size"], ["total.protocol"], ...).
    Members on stacks with different identities cannot talk (Bottom's stamp covers it) and never
    merge; {!Group.Make.switch} changes a group's stack at a view boundary.

    A registry of layers by name lets a member build a stack it is told of: every layer
    {!Properties.layers} returns, and every layer given to {!Group.Make.join} or
    {!Group.Make.switch}, is registered. *)

type t

val of_layers : params:Consort.Params.t -> Consort.Layer.t list -> t

val to_string : t -> string
(** ["gmp:frag:...:bottom|frag.size=60000,..."]: what a view installation carries. *)

val of_string : string -> (t, string) result
(** The identity in [to_string]'s form; [Error] says why not, in one sentence. *)

val digest : t -> string
(** 16 hex digits of the MD5 of {!to_string}: what discovery messages carry. *)

val describe : t -> string
(** The layer names, ["gmp:frag:...:bottom"]. *)

val equal : t -> t -> bool
val register : Consort.Layer.t -> unit

val resolve : t -> base:Consort.Params.t -> (Consort.Layer.t list * Consort.Params.t, string) result
(** The registered layers of [t], and [base] with [t]'s tunables over it; [Error] names a layer this
    program does not know, or a tunable that does not parse. *)
