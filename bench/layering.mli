(** The cost of layering: a message down and back up stacks of 1, 5, 10 and 20 layers, beside a
    direct function call, in the same run.

    At the bottom the message becomes one datagram buffer (headers then body, as a transport sends
    it) and goes back up from there; the baseline does the same copy with no layers between the
    caller and the delivery, so the difference is the cost of layering alone. *)

type row = {
  layers : int;  (** 0 for the direct-call baseline *)
  kind : string;  (** ["direct"], ["pass"] (empty headers) or ["seq"] (a varint header per layer) *)
  ns_per_msg : float;
  words_per_msg : float;  (** minor words allocated per message *)
}

val run : ?iterations:int -> ?depths:int list -> unit -> row list
(** [run ()] measures each configuration, best of five rounds of [iterations] (default 200_000)
    messages. *)

val pp_table : row list Fmt.t
(** A table with the ratio of each row to the direct-call baseline. *)

val to_json : row list -> string
