(** Amoeba's status codes, carried in the [status] field of a reply header.

    A server answers every request with a status: [`Ok] or one of the standard errors, numbered as
    in Amoeba's [stderr.h]. Codes that are not standard (a server's own) are kept as [`Other n];
    decoding is total. *)

type t =
  [ `Ok  (** STD_OK, 0 *)
  | `Capbad  (** STD_CAPBAD, -1: bad capability *)
  | `Combad  (** STD_COMBAD, -2: unknown command *)
  | `Argbad  (** STD_ARGBAD, -3: bad argument *)
  | `Notnow  (** STD_NOTNOW, -4: not now (object busy or not ready) *)
  | `Nospace  (** STD_NOSPACE, -5: no space *)
  | `Denied  (** STD_DENIED, -6: too few rights *)
  | `Nomem  (** STD_NOMEM, -7: out of memory *)
  | `Exists  (** STD_EXISTS, -8: already exists *)
  | `Notfound  (** STD_NOTFOUND, -9: no such object *)
  | `Syserr  (** STD_SYSERR, -10: internal error *)
  | `Intr  (** STD_INTR, -11: interrupted *)
  | `Overflow  (** STD_OVERFLOW, -12: too large *)
  | `Writeprot  (** STD_WRITEPROT, -13: write-protected *)
  | `Nomedium  (** STD_NOMEDIUM, -14: no medium *)
  | `Other of int  (** a server's own code *) ]

val to_int : t -> int

val of_int : int -> t
(** [of_int n] is the status numbered [n]; [of_int (to_int s) = s] for every standard status. *)

val codec : t Consort.Codec.t
val equal : t -> t -> bool

val pp : t Fmt.t
(** [pp] prints Amoeba's name and a short reason: ["STD_CAPBAD (bad capability)"]. *)

val to_string : t -> string

val of_cap_error : [< Cap.error ] -> t
(** [`Capbad] and [`Denied] from {!Cap.validate}. *)
