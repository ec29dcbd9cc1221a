(** The [Rekey] feature of the group runtime ({!Group.Make}): a fresh key for each view, drawn by
    the view's maker and wrapped in its Install for each of the view's members only (not for the
    members excluded or leaving, which get the Install too), unwrapped by each member under the
    maker's public key and activated as the view is installed. The cryptography is the transport's
    ([src/seal]), given as {!keys}. *)

type keys = {
  public : string;
  draw :
    vid:string ->
    me:string ->
    context:string ->
    (string * string) list ->
    (string * string) list * (unit -> unit);
  unwrap :
    vid:string ->
    me:string ->
    context:string ->
    installer:string * string ->
    string ->
    (unit -> unit) option;
}
(** {!Group.rekey}. *)

type t

val create : me:string -> keys option -> t
(** Without keys, no view has one. *)

val enabled : t -> bool

val public : t -> string
(** This member's public key for its member record ([""] without Rekey). *)

val no_key : t -> int
(** Installs refused for want of a view key (counter [no_view_key]). *)

val refused : t -> unit
(** Counts an Install refused for want of a view key. *)

val activate : t -> vid:string -> (unit -> unit) option -> unit
(** View [vid] is installed: activate the key its maker sent (from {!view_key} or {!wrap}), or, with
    none (a view of one), a key of this member's own. *)

val wrap : t -> vid:string -> members:Side.member list -> Side.t -> Side.t * (unit -> unit) option
(** The Install of view [vid] that this member makes, with a fresh key wrapped for each of [members]
    but itself; and that key's activation. Unchanged without Rekey. *)

val view_key :
  t ->
  view_members:string array ->
  pubs:string array ->
  Side.t ->
  ((unit -> unit) option, string) result
(** The key an Install brings this member, unwrapped under its maker's public key: the one in this
    member's view ([view_members], [pubs] by rank) if the maker is in it, else the Install's.
    [Error] says why not. [Ok None] without Rekey. *)
