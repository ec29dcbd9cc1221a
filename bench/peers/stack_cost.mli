(** The cost of a stack per message, in one process: two members' stacks wired back to back (what
    member 0's stack sends is handed, as one datagram buffer, to member 1's stack, and the other
    way), member 0 casting 16 bytes, timers run when due. A message counts when member 1's
    application has it; every cast must arrive. *)

type row = {
  stack : string;  (** what was measured *)
  path : string;  (** ["layered"] or ["fused"] (the bypass, {!Consort.Stack.fused}) *)
  layers : int;
  ns_per_msg : float;
  words_per_msg : float;  (** minor words allocated per message, both stacks *)
  major_words_per_msg : float;  (** words allocated or promoted on the major heap *)
}

val run : ?iterations:int -> ?rounds:int -> unit -> (row list, string) result
(** [run ()] measures the default stack ([Properties.vsync]) casting and sending, and a stack of 10
    layers with a varint header each, each layered and fused (the default stack twice, keeping the
    better run of each path), and Bottom alone (the baseline): the fastest of [rounds] (3) rounds of
    [iterations] (50_000) casts, after a warm-up of a quarter of that. An error says a stack stalled
    or lost casts. *)

val run_default :
  ?iterations:int -> ?rounds:int -> ?send:bool -> fused:bool -> unit -> (row list, string) result
(** [run_default ~fused ()] is the default stack's row of {!run} alone, on one path; with
    [~send:true] its row of sends (member 0 sends to member 1). *)

val ratios : row list -> string list
(** One line per stack: fused / layered in ns and minor words, in all and above the baseline (the
    same harness with Bottom alone, layered: what the stack above Bottom costs), and minor words per
    layer and message above it (down at member 0 and up at member 1 count as two passes). *)

val to_json : row list -> Yojson.Safe.t

val harness_alone : iterations:int -> rounds:int -> float * float
(** [harness_alone ~iterations ~rounds] is the harness's own cost with no stack (ns and minor words
    per message): the message made, copied to one buffer as a transport would, handed over and taken
    back, which every row includes. *)

val by_layer : ?only:int -> iterations:int -> rounds:int -> unit -> (row list, string) result
(** [by_layer ()] measures the default stack built up from the bottom, one layer more each time
    (Bottom alone, then Suspect and Bottom, ...), fused and layered: what each layer adds on each
    path. [~only:k] measures the lowest [k] layers alone, fused (for a profile). *)
