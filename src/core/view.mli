(** Views: who is in the group, as this member sees it.

    A stack is built for one view; a later issue's membership layers rebuild it at each view change.
*)

type t = {
  group : string;  (** the group's name *)
  id : string;  (** names this view; the same at every member that installs it *)
  ltime : int;  (** logical time of the view, increasing at each change *)
  members : string array;  (** endpoint names in rank order *)
  rank : int;  (** this member's rank *)
}

val v : group:string -> ?ltime:int -> ?id:string -> members:string array -> rank:int -> unit -> t
(** [id] defaults to ["LTIME:MEMBER0"].
    @raise Invalid_argument if [rank] is not a valid index of [members]. *)

val nmembers : t -> int

val group_hash : t -> int
(** A 32-bit hash of the group name, carried by Bottom to filter datagrams of other groups. *)

val stamp : t -> int
(** A 32-bit hash of the group name and the view id, carried by Bottom so that datagrams of other
    groups, and of other views of this group, are dropped. *)

val pp : t Fmt.t
