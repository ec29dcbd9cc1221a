(** A device wrapper that impairs frames sent through it: seeded drop, corruption, duplication,
    reordering and delay (what netem does, in process and deterministically).

    Impairments apply to frames sent on the wrapper; frames received pass through untouched (wrap
    both ends of a link for both directions). *)

type config = {
  drop : float;  (** probability a frame is lost *)
  corrupt : float;  (** probability one random bit of a frame is flipped (in a copy) *)
  duplicate : float;  (** probability a frame is sent twice *)
  reorder : float;  (** probability a frame is held back by [reorder_delay] *)
  reorder_delay : Consort.Time.t;
  delay : Consort.Time.t;  (** added to every frame *)
  jitter : Consort.Time.t;  (** a uniform random extra delay in \[0, jitter) *)
}

val none : config
(** No impairment. *)

val pp_config : config Fmt.t

type stats = { sent : int; dropped : int; corrupted : int; duplicated : int; reordered : int }
type t

val wrap : clock:Clock.t -> seed:int -> pool:Consort.Pool.t -> config -> Device.t -> t
(** [wrap ~clock ~seed ~pool config dev] is a wrapper around [dev]; copies (for corruption and
    duplication) come from [pool]. *)

val device : t -> Device.t
val set_config : t -> config -> unit
val stats : t -> stats
