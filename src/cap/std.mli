(** Amoeba's standard operations, which every server answers: [std_info], [std_restrict],
    [std_destroy], [std_touch], [std_age], [std_status].

    A server hands every request to {!handle} first; it answers the standard commands from the
    server's object table ({!objects}) and leaves the others ([None]) to the server. Command numbers
    are Amoeba's. Clients build requests with the [*_request] functions and read the replies with
    the [parse_*] ones (or use [Rpc.Make]'s [Std] calls). *)

val std_age : int
(** 1001 *)

val std_destroy : int
(** 1003 *)

val std_info : int
(** 1004 *)

val std_restrict : int
(** 1005 *)

val std_status : int
(** 1006 *)

val std_touch : int
(** 1007 *)

type objects = {
  secret : int -> Cap.Secret.t option;  (** the secret of an object; [None]: no such object *)
  info : int -> string;  (** a one-line description of an object *)
  destroy : int -> Status.t;  (** destroy an object ([`Ok] when done) *)
  touch : int -> unit;  (** the object is in use: reset its age *)
  age : unit -> unit;  (** one round of ageing: objects not touched for long go *)
  status : unit -> string;  (** a few lines about the server *)
}
(** What the standard operations need from a server. Each function is called only after the
    capability was validated with the rights the operation needs: none for info, restrict, touch and
    status; {!Rights.destroy} for destroy; {!Rights.admin} for age. *)

val validate : Port.t -> objects -> need:Rights.t -> Header.t -> (int, Status.t) result
(** [validate port objs ~need h] checks the capability in [h] against the object's secret: the
    object number, or [`Notfound] (no such object), [`Capbad] (bad check or another port) or
    [`Denied] (too few rights). Servers use it for their own commands too. *)

val handle : Port.t -> objects -> Header.t -> string -> (Header.t * string) option
(** [handle port objs h data] is the reply to a standard command, or [None] if [h.command] is not
    one. [std_age] needs {!Rights.admin} on the capability given (typically the server's own
    capability, object 0). *)

(** {1 Clients} *)

val info_request : Cap.t -> Header.t
val restrict_request : Cap.t -> Rights.t -> Header.t
val destroy_request : Cap.t -> Header.t
val touch_request : Cap.t -> Header.t
val age_request : Cap.t -> Header.t
val status_request : Cap.t -> Header.t

val parse_text : Header.t * string -> (string, Status.t) result
(** The reply of info or status. *)

val parse_unit : Header.t * string -> (unit, Status.t) result
(** The reply of destroy, touch or age. *)

val parse_restrict : Header.t * string -> (Cap.t, Status.t) result
(** The reply of restrict: the narrower capability. *)
