(** One stack driven by hand, at the level of bytes: the test feeds it datagrams as they would
    arrive from the network, moves its clock, and reads what it sent and delivered. Shared by the
    layer tests. *)

open Consort

type t = {
  st : Stack.t;
  clock : Time.t ref;
  sent : (Event.dst * string) list ref;  (** datagrams sent, newest first *)
  got : (Event.src * string) list ref;  (** messages delivered, newest first *)
  ctl : (Time.t * Event.up_ctl) list ref;
      (** control events that reached the application, newest first *)
  pool : Pool.t;
  group : int;  (** the view's stamp, as Bottom writes it *)
}

val create :
  ?params:Params.t -> ?fused:bool -> ?group:string -> ?n:int -> ?rank:int -> Layer.t list -> t
(** [create layers] is [layers] running as member [rank] (default 0) of a view of [n] members
    (default 2) named [group] (default "test"), its clock at 0. It reads and writes layered headers,
    so its stack takes the layered path unless [fused] is [true]. *)

val feed : t -> string -> unit
(** [feed s bytes] hands [bytes] to the stack as a received datagram. *)

val advance : t -> Time.t -> unit
(** [advance s time] moves the clock to [time] and runs the alarm once if it is due: alarms set for
    earlier times fire late, at [time]. *)

val run_until : t -> Time.t -> unit
(** [run_until s time] runs every alarm at the time it asked for, up to [time], then moves the clock
    to [time]. *)

val counter : t -> string -> string -> int
(** [counter s layer name]; fails the test if there is no such counter. *)

val counter_of : Stack.t -> string -> string -> int

val stop : t -> unit
(** [stop s] stops the stack and checks that no buffer leaked. *)

val check_no_leaks : Pool.t -> unit
(** Every buffer handed out by the pool has been released: none leaked to the collector, none still
    held. *)

val from_send : t -> int -> string
(** Bottom's header of a point-to-point datagram from rank [r] in this view. *)

val from_cast : t -> int -> string
(** Bottom's header of a multicast from rank [r] in this view. *)

val split : 'h Codec.t -> string -> Consort_group.Bottom.header * 'h * string
(** [split codec bytes] splits an outgoing datagram into Bottom's header, [codec]'s header and the
    rest; fails the test if either does not decode. *)
