(** Events that flow through a stack.

    Message events carry a {!Msg.t} and the layer's typed header (see
    {!Layer.S}); control events carry none. Control events are extensible
    variants so that each family of layers adds its own; a layer passes on
    any control event it does not know. *)

(** Where a message goes, on the way down. *)
type dst =
  | Cast  (** to every other member of the view *)
  | Send of int  (** to the member of this rank *)

(** Where a message came from, on the way up. *)
type src =
  | Cast_from of int  (** a cast by the member of this rank *)
  | Send_from of int  (** a point-to-point message from this rank *)
  | Raw  (** a datagram from the transport, not yet decoded by Bottom *)

type dn_ctl = ..
(** Control events going down. *)

type up_ctl = ..
(** Control events going up. *)

type up_ctl +=
  | Lost_message of int
        (** a reliable layer gave up on messages from this rank *)
  | Blocked of bool
        (** flow control: [true] when the application should stop sending,
            [false] when it may send again *)

type dn_ctl += Stop  (** the stack is being torn down *)

val pp_dst : dst Fmt.t
val pp_src : src Fmt.t

val pp_up_ctl : up_ctl Fmt.t
val pp_dn_ctl : dn_ctl Fmt.t

val register_up_ctl_printer : (up_ctl -> (Format.formatter -> unit) option) -> unit
val register_dn_ctl_printer : (dn_ctl -> (Format.formatter -> unit) option) -> unit
