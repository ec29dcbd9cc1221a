(** A message's body handed to the application as a view of the received buffer, instead of a string
    ([Group.join ~on_bytes]). *)

val bytes :
  pool:Consort.Pool.t ->
  counts:Group_counters.t ->
  Consort.Msg.t ->
  ('k -> origin:string -> Cstruct.t -> unit) ->
  'k ->
  origin:string ->
  unit
(** [bytes ~pool ~counts msg f kind ~origin]: [f kind ~origin] gets [msg]'s body as a view of the
    received datagram when it is in one piece (or empty), else flattened once into a slice of [pool]
    (counted in [counts]'s copies), released after [f] returns or raises; [msg] is released after.
    The view is valid only during [f]. *)

val string :
  counts:Group_counters.t ->
  cb:Group_types.callbacks ->
  xfer:Xfer.t option ->
  is_current:('a Group_view.t -> bool) ->
  'a Group_view.t option ->
  Consort.Event.src ->
  Consort.Msg.t ->
  unit
(** A message of view [c]'s stack delivered as a string (copied once, counted, [msg] released): to
    the application's callbacks, or through state transfer ([xfer]) when the stack has it; nothing
    once [c] is no longer current. *)
