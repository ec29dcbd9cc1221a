(** The stack on a TAP device, as [consort net up --tap NAME --ip ADDR/LEN] runs it: it answers ARP
    and ping, echoes UDP on port 7 and discards UDP on port 9 (the standard services), and lets the
    caller add more (TCP echo and discard) through [setup]. *)

type ip6 = { ip6 : Consort_net.Ipstack.Ip6.t; udp6 : Consort_net.Ipstack.Udp6.t }
(** IPv6 beside IPv4 on the same Ethernet, with UDP over it. *)

type t = {
  loop : Consort_engine.Loop.t;
  pool : Consort.Pool.t;
  tap : Tap.t;
  stack : Consort_net.Ipstack.t;
  v6 : ip6 option;  (** with [ip6] *)
}

val start :
  ?ip6:string ->
  ?mtu:int ->
  ?gateway:string ->
  ?mac:string ->
  ?udp_echo:int list ->
  ?udp_discard:int list ->
  ?setup:(t -> unit) ->
  ?loop:Consort_engine.Loop.t ->
  tap:string ->
  ip:string ->
  unit ->
  (t, [ `Msg of string ]) result
(** [start ~tap ~ip ()] opens (creating it if needed) TAP interface [tap], brings it up, and runs
    the stack on it with address [ip] ([ADDR/LEN]) on [loop] (default a fresh one), with UDP echo on
    [udp_echo] (default [[7]]) and discard on [udp_discard] (default [[9]]); then calls [setup].
    With [ip6] ([ADDR/LEN]) it also runs IPv6 with that address (and its link-local one), answering
    neighbour discovery and ping6, with the same UDP services. Nothing runs until the loop does. *)

val stop : t -> unit
(** [stop t] closes the TAP device. *)

val run :
  ?ip6:string ->
  ?mtu:int ->
  ?gateway:string ->
  ?mac:string ->
  ?udp_echo:int list ->
  ?udp_discard:int list ->
  ?setup:(t -> unit) ->
  ?stats_every:float ->
  ?timeout:Consort.Time.t ->
  tap:string ->
  ip:string ->
  unit ->
  (unit, [ `Msg of string ]) result
(** [run ~tap ~ip ()] is {!start}, then the loop until SIGINT or SIGTERM (or [timeout]), printing
    the stack's counters every [stats_every] seconds if given and once at the end, then {!stop}. *)
