(** Two devices joined by a wire in memory, for tests.

    A frame sent on one end is copied into a fresh packet from the other end's pool (as a real wire
    would: the sender keeps nothing) and delivered through the {!Clock} after [latency], so with a
    [Clock.Virtual] clock whole exchanges run deterministically. Frames sent in order arrive in
    order. *)

val pair :
  ?latency:Consort.Time.t ->
  ?mtu:int ->
  ?names:string * string ->
  clock:Clock.t ->
  pool_a:Consort.Pool.t ->
  pool_b:Consort.Pool.t ->
  Mac_addr.t ->
  Mac_addr.t ->
  Device.t * Device.t
(** [pair ~clock ~pool_a ~pool_b mac_a mac_b] is two devices wired together; frames arriving at [a]
    are allocated from [pool_a]. [latency] defaults to 10 microseconds, [mtu] to 1500. A frame over
    [mtu + 14] bytes is refused with [`Too_big]. *)
