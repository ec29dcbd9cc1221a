(** The few cryptographic helpers the capability services share, all on top of [mirage-crypto]:
    random bytes, HMAC-SHA256, constant-time equality.

    Randomness comes from a [Mirage_crypto_rng] generator: the one given with [?g], or the process's
    default generator, which {!random} seeds from the operating system ([getrandom]) the first time
    it is needed. Tests and the simulator pass a generator seeded from their own seed
    ({!deterministic}) so that runs repeat. *)

val random : ?g:Mirage_crypto_rng.g -> int -> string
(** [random ?g n] is [n] random bytes from [g] or the default generator. *)

val deterministic : string -> Mirage_crypto_rng.g
(** [deterministic seed] is a generator seeded with [seed] only: the same seed gives the same bytes.
    For tests and simulations, never for keys that protect anything. *)

val hmac : key:string -> string list -> string
(** [hmac ~key parts] is HMAC-SHA256 under [key] of the concatenation of [parts] (32 bytes). *)

val sha256 : string list -> string
(** [sha256 parts] is the SHA-256 digest of the concatenation of [parts]. *)

val equal : string -> string -> bool
(** [equal a b] compares in time independent of where [a] and [b] differ. *)

val to_hex : string -> string
val of_hex : string -> (string, string) result
