(** The table that lets a replicated state machine answer a retried request instead of applying it
    again: each client's last request number and response, the oldest client forgotten first when
    the table is full. The key-value store's {!Machine} and the directory server's machine keep one.
*)

type 'r t

val create : unit -> 'r t

val clients : 'r t -> int
(** The clients remembered. *)

val apply :
  'r t ->
  max_clients:int ->
  client:int64 ->
  req:int ->
  older:(string -> 'r) ->
  (unit -> 'r) ->
  'r * bool
(** [apply t ~max_clients ~client ~req ~older f]: for the client's last request, its recorded
    response again; for an older one, [older why]; otherwise [f ()], recorded as the client's last
    (the oldest client forgotten first while [max_clients] or more are remembered). The [bool]: [f]
    was applied. *)

val codec : 'r Consort.Codec.t -> 'r t Consort.Codec.t
(** The clients, oldest first, each with its last request number and response. *)
