(** The switching feature of the group runtime ({!Group.Make.switch}): the stack the current view
    runs (its layers, tunables and identity, {!Stack_id}) and its epoch (the switches that made it);
    a switch wanted (asked by the application, by a member of the view, or taken from a partition on
    a newer stack); and the stack of the next view this coordinator makes. A switch happens at a
    view boundary: the coordinator flushes its view, and the next view runs the new stack.
    Partitions on different stacks never merge: the one on the older stack, or of one epoch the one
    whose stack has the lesser identity, switches to the other's first. A switch may not add or
    remove state transfer ([Xfer]). *)

type t

val create : me:string -> params:Consort.Params.t -> layers:Consort.Layer.t list -> xfer:bool -> t
(** The member's stack as configured (epoch 0); [xfer]: it has the Xfer layer. *)

val layers : t -> Consort.Layer.t list
(** The current stack's layers and tunables, to build the next view's stack with. *)

val params : t -> Consort.Params.t
val sid : t -> Stack_id.t
val epoch : t -> int

val current : t -> Side.stack
(** The current stack as the side channel names it. *)

val is_current : t -> Side.stack -> bool

val next : t -> Side.stack
(** The stack of the view this coordinator makes next: the one it switches to, if any. *)

val buildable : t -> Side.stack -> (unit, string) result
(** Whether this member can build [stack] (from the registry of layers); [Error] says why not. *)

val adopt : t -> Side.stack -> (bool, string) result
(** The next view runs [stack]: [Ok true] when it is another stack than the current one, which it
    now is. *)

val installed : t -> unit
(** A view is installed: the switch this coordinator made, if any, is done. *)

val other :
  t ->
  peer:string ->
  Side.stack ->
  [ `Unknown of string * string | `Incompatible of string * string ] option
(** A partition whose member [peer] runs [stack], not this one's: if it is newer, a switch to it is
    wanted; [`Unknown (theirs, reason)]: newer but it cannot be built here;
    [`Incompatible (ours, theirs)]: both as configured (epoch 0). *)

val asked : t -> Side.stack -> unit
(** A member of this view asks this member (its coordinator) to switch to [stack]. *)

val want : t -> Stack_id.t -> unit
(** The application asks for a switch to this stack (nothing if it is the current one). *)

val wanted : t -> (int * Stack_id.t) option
(** The switch wanted, if any is still to make (one made since is forgotten): its epoch and stack.
*)

val start : t -> vid:string -> int * Stack_id.t -> unit
(** This coordinator starts the switch of view [vid]: the view it makes next runs the stack. *)

val due :
  t ->
  vid:string ->
  coordinator:bool ->
  idle:(unit -> bool) ->
  blocked:bool ->
  [ `Flush | `Ask of Side.stack ] option
(** The periodic work's step of a switch wanted ({!wanted}) in view [vid]: the coordinator, its view
    not blocked and [idle ()] (no merge, absorb or leave under way), starts it ({!start}) and
    flushes its view ([`Flush]); another member, its view not blocked, asks the coordinator
    ([`Ask stack]). *)
