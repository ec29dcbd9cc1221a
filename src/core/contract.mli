(** What a layer provides to the layers above it and requires of those below (the Above / Below
    specifications of Ensemble's layers).

    A stack is checked bottom-up: each layer's requirements must be among the properties provided by
    the layers under it (or by the transport, which provides {!net}). *)

type t

val v : string -> doc:string -> t
(** [v name ~doc] is the property [name]. Two properties are equal when their names are. *)

val name : t -> string
val doc : t -> string
val equal : t -> t -> bool
val pp : t Fmt.t

val net : t
(** Raw datagrams from a transport: what the driver under a stack gives. *)

val datagram : t
(** Best-effort casts and sends between the ranks of a view, with the origin known and garbage
    filtered (Bottom). *)

val reliable_send : t
(** Point-to-point messages delivered exactly once, in FIFO order, while both ends stay up (Pt2pt).
*)

val reliable_cast : t
(** Casts delivered exactly once to every member, in FIFO order per sender, for a fixed membership
    (Mnak). *)
