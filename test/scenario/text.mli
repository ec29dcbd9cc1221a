val contains : string -> string -> bool
(** [contains s sub] is [true] if [sub] occurs in [s]. *)
