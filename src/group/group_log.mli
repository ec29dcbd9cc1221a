(** The log source of the group runtime ([consort.group]), shared by {!Group} and its feature
    modules ({!Group_primary}, ...), so that what they log reads as it did from one module. *)

val src : Logs.src

module Log : Logs.LOG
