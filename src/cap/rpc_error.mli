(** Amoeba's RPC errors: why a transaction did not give a reply.

    Each error says whether the request may have been carried out ({!outcome}): a client must not
    retry a request that is not idempotent after an error whose outcome is [`Unknown] unless it
    knows better. *)

type t =
  [ `Failure of string
    (** RPC_FAILURE: the server went silent or restarted during the transaction; the request may or
        may not have been carried out. The string says what was seen. *)
  | `Notfound  (** RPC_NOTFOUND: no server answered a locate for the port; nothing was sent *)
  | `Badaddress of string
    (** RPC_BADADDRESS: the request cannot be sent (too large, bad arguments); nothing was sent *)
  | `Aborted  (** RPC_ABORTED: the transaction was cancelled locally (node closed) *)
  | `Tryagain  (** RPC_TRYAGAIN: the server had no room for the request and did not carry it out *)
  | `Combad of string
    (** RPC_COMBAD: the peer broke the protocol (an undecodable or impossible message) *)
  | `Badport  (** RPC_BADPORT: the header names no valid port (the null port) *)
  | `Unsafe of string
    (** RPC_UNSAFE: the process at the port's address could not prove that it holds the port's key
        (a rogue server or a corrupted handshake); nothing was sent to it *) ]

val outcome : t -> [ `Not_executed | `Unknown ]
(** [outcome e] is [`Not_executed] when the request was certainly not carried out ([`Notfound],
    [`Badaddress], [`Tryagain], [`Badport], [`Unsafe]), [`Unknown] otherwise. *)

val to_string : t -> string

val pp : t Fmt.t
(** [pp] prints Amoeba's name and the reason: ["RPC_FAILURE: server silent (outcome unknown)"]. *)

val equal : t -> t -> bool
