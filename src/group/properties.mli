(** Properties a group asks for, and the stack that provides them (Ensemble's [Property]).

    A property set is turned into an ordered list of layers, top first; the stack builder checks the
    layers' contracts, so a set that cannot be satisfied is refused with a message naming the
    missing property. *)

type t =
  | Gmp  (** group membership: views, joins, leaves, failures *)
  | Sync  (** virtual synchrony: flush before each view change *)
  | Heal  (** find other partitions of the group and merge with them *)
  | Frag  (** fragment messages larger than a datagram (up to 64 MiB) *)
  | Suspect  (** detect failures by heartbeats *)
  | Flow  (** window and credit flow control *)
  | Slander  (** share suspicions among members *)
  | Total  (** casts delivered in one order at every member ({!module-Total}); needs [vsync] *)
  | Causal  (** casts delivered in causal order ({!module-Causal}); needs [vsync] *)
  | Agree  (** safe delivery ({!module-Agree}; ["Safe"] is accepted for it); needs [vsync] *)
  | Auth
      (** only holders of the group's secret join, and every datagram is authenticated (the
          transport seals it: [Consort_seal.Seal]); adds no layer *)
  | Privacy  (** [Auth], and every payload encrypted; adds no layer *)
  | Rekey
      (** [Auth], and each view's datagrams sealed under a key of its own, agreed at the view change
          (X25519), so that a member that left or was excluded can neither read nor forge later
          views' traffic; on whenever [Auth] or [Privacy] is (see [Consort_seal.Seal]); adds no
          layer *)
  | Xfer  (** state transfer to members that join (needs [Gmp]) *)
  | Evs
      (** extended virtual synchrony: safe delivery ([Agree], which it brings) stated relative to
          transitional views, which the runtime announces at each view change to an application that
          asks ([Group.Make.join ~transitional]); needs [vsync] *)
  | Switch
      (** the group may switch to another stack while it runs, at a view boundary
          ([Group.Make.switch]; needs [Gmp]); adds no layer *)
  | Debug
      (** debugging layers: {!Chk.fifo} on top (and {!Chk.sync} with [Gmp], {!Chk.total} above
          [Total]) report violations of their property with the events that led to them;
          {!Fault.drop}, [delay], [dup] and [partition] above Bottom act on what arrives, as their
          tunables say (by default they let everything through) *)
  | Migrate
      (** a member may move to another address keeping its id and place in the view
          ([Group.Make.migrate]; needs [Gmp]); adds no layer *)
  | Primary
      (** a primary component with quorum ({!module-Primary}: static votes, [primary.expected] and
          [primary.votes]): the application hears whether each view is primary, and casts are
          refused outside it; needs [Gmp] *)
  | Cltsvr
      (** client-server groups: clients that are not members send requests to the servers and hear
          notifications ([Cltsvr]); needs [Gmp] and [Total] (the servers' session table changes in
          one order at every server) *)
  | Scale
      (** large groups: {!Ringfd} in place of {!module-Suspect} (each member watches
          [ringfd.monitors] ring neighbours) and {!Mnak.tree_layer} in place of {!Mnak.layer}
          (statuses gathered up a tree of [mnak.fanout]): heartbeats and stability cost each member
          the same in a group of any size; cannot go with [Agree] or [Evs] *)

val all : t list

val vsync : t list
(** Ensemble's default set: [Gmp; Sync; Heal; Frag; Suspect; Flow; Slander] ([all] adds the ordering
    properties). *)

val to_string : t -> string

val doc : t -> string
(** What the property guarantees, in one line. *)

val not_available : (string * string) list
(** Properties of Ensemble's Table 1 (and of quorum, [Primary]) that this version does not build:
    each name with what it would guarantee. {!of_string} refuses them with {!Not_available}. *)

(** Why a property set is refused. *)
type error =
  | Unknown of { name : string; known : string list }  (** not a property *)
  | Empty  (** no property given *)
  | Sync_without_gmp  (** [Sync] needs [Gmp] *)
  | Stack of string  (** the layers' contracts do not fit (see {!Consort.Stack.check}) *)
  | Not_available of { name : string; what : string }
      (** a property of {!not_available}: known, not built *)
  | Needs of { prop : t; needs : t; why : string }  (** [prop] cannot work without [needs] *)
  | Conflict of { prop : t; other : t; why : string }  (** [prop] cannot work with [other] *)

val pp_error : error Fmt.t
(** One line, naming what is wrong. *)

val of_string : string -> (t list, error) result
(** [of_string "Gmp,Sync,Heal"] or ["vsync"] (names are case-insensitive; ["vsync"] stands for
    {!vsync}). *)

val pp : t list Fmt.t

val layers : t list -> (Consort.Layer.t list, error) result
(** [layers ps] is the stack for [ps], top first, checked. Membership needs reliable casts and
    sends, so the reliable layers are always there, and a failure detector, so [Gmp] brings
    [Suspect] with it; [Sync] without [Gmp] is refused, and so are [Total], [Causal], [Agree],
    [Evs], [Xfer], [Heal], [Switch], [Migrate], [Primary], [Cltsvr] and [Rekey] without [Gmp], and
    [Cltsvr] without [Total] ({!Needs}); [Scale] with [Agree] or [Evs] ({!Conflict}). *)

val describe : t list -> string
(** ["gmp:slander:pt2pt:mnak:suspect:bottom"], or the error. *)
