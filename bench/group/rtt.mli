(** Round-trip latency of 16-byte messages between two processes on 127.0.0.1, ping-pong: casts
    between the two members of a group with the [vsync] stack, beside datagrams over the engine's
    UDP transport and loop with no layers, and beside blocking kernel UDP sockets; each with both
    processes on one CPU and on two different CPUs. *)

type row = {
  kind : string;
      (** ["raw UDP"], ["engine UDP"], ["group cast"], ["Total seq"] or ["Total token"] *)
  placement : string;  (** ["same CPU"], ["different CPUs"] or ["unpinned"] *)
  cpus : string;  (** where each process ran, such as ["0,1"] *)
  samples : float array;  (** round trips in microseconds *)
}

val run :
  exe:string ->
  ?count:int ->
  ?warmup:int ->
  ?params:string ->
  ?placements:[ `Same | `Different ] list ->
  ?rounds:int ->
  ?total:bool ->
  ?seal:bool ->
  unit ->
  (row list, string) result
(** [run ~exe ()] measures [count] round trips (default 5000) for each kind and placement, with
    [exe bench peer] processes, in [rounds] (default 3) that each go through every configuration
    with a fresh pair of processes, [warmup] round trips (default 500) before each round's measures.
    With [total], also casts with [Total], by the sequencer and by the token; with [seal], also
    casts sealed with [Auth] and with [Privacy]. *)

val pp_table : row list Fmt.t
val to_json : row list -> string
