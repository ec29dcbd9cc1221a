(** The application's side of the group runtime ({!Group.Make}): whether a message may be handed
    over now (admission: the member is in the group, the message fits the stack, flow control is not
    full, the queue has room), the queue of messages made while a view changes ([group.queue] bytes
    at most, each message counted 64 bytes more), which go out in the next view, and the [flow]
    callback the application hears when either the stack's flow control or a full queue asks it to
    pause, and again when it may go on. *)

type error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Not_member of string
  | Leaving
  | Exited
  | Not_primary of string  (** {!Group.error} *)

type item = [ `Cast of string | `Send of string * string ]
type t

val create : limit:int -> flow:(bool -> unit) -> t
(** [limit]: the queue's bound in bytes; [flow]: the application's callback. *)

val length : t -> int
val is_empty : t -> bool

val refused : t -> int
(** Messages refused (counter [refused]). *)

val update_flow : t -> exited:bool -> unit
(** Tells the application [flow b] when [b] (the stack's flow control or a full queue asks it to
    pause) changed since it was last told, unless the member has exited. *)

val set_stack_flow : t -> bool -> unit
(** The stack's flow control asks to pause, or no longer does (the caller then {!update_flow}s). *)

val admit :
  t -> exited:bool -> leaving:bool -> max_message:int -> blocked:bool -> int -> (unit, error) result
(** Whether a message of this many bytes may be handed over now ([blocked]: a view change is under
    way, so it would be queued). A message refused for lack of queue room makes the queue full (the
    application hears [flow true]) until it is empty again. *)

val refuse : t -> error -> ('a, error) result
(** Counts a refused message. *)

val push : t -> item -> unit
(** Queues a message admitted while it cannot go out. *)

val flush : t -> ready:(unit -> bool) -> (item -> unit) -> unit
(** Hands each queued message, oldest first, to the function while [ready ()]; the queue is no
    longer full once it is empty. *)
