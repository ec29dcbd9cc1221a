(** [contains s sub] is [true] if [sub] occurs in [s]. *)
val contains : string -> string -> bool
