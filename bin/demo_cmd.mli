(** [consort demo] and [consort mcast-peer]: the main job of this release. *)

val demo : int Cmdliner.Cmd.t
val peer : int Cmdliner.Cmd.t
