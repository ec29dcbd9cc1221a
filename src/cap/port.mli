(** Ports: location-independent names of services, and the keys behind them.

    In Amoeba a server listens on a secret get-port G and clients address it by the put-port F(G), F
    one-way, so that knowing the put-port does not let anyone listen on it. Here the secret is an
    Ed25519 private key ({!Key.t}) and the put-port is derived from its public key:
    [port = SHA-256("consort-port-v1" ‖ public key)], truncated to 16 bytes. A process proves that
    it serves a port by showing the public key (whose digest must be the port) and a signature made
    with the private key: locate answers and the secure wire's handshake are signed this way, so a
    process without the key cannot answer for the port. Several processes loaded with the same key
    serve one port (replicas, a server that moved). *)

type t
(** A put-port: 16 bytes. *)

val length : int
(** 16. *)

val of_raw : string -> (t, string) result
(** [of_raw s] is the port whose bytes are [s]; [Error] unless [s] has {!length} bytes. *)

val to_raw : t -> string
val equal : t -> t -> bool
val compare : t -> t -> int
val hash : t -> int
val to_hex : t -> string
val of_hex : string -> (t, string) result

val pp : t Fmt.t
(** [pp] prints the first 6 bytes in hex, enough to tell ports apart in a log. *)

val codec : t Consort.Codec.t
(** Exactly {!length} bytes. *)

val of_public : string -> t
(** [of_public pub] is the port of the raw 32-byte Ed25519 public key [pub]. *)

(** A server's identity: an Ed25519 key pair. *)
module Key : sig
  type port := t
  type t

  val generate : ?g:Mirage_crypto_rng.g -> unit -> t
  (** [generate ?g ()] is a fresh key pair (see {!Consort_crypto.Crypto.random} for [g]). *)

  val port : t -> port
  (** [port k] is the put-port that [k] serves. *)

  val public : t -> string
  (** [public k] is the raw 32-byte public key. *)

  val sign : t -> string -> string
  (** [sign k msg] is the 64-byte Ed25519 signature of [msg]. *)

  val to_string : t -> string
  (** [to_string k] is the text form of [k] for a key file: ["consort-key-v1:"] and the 32-byte
      private key in hex. It is a secret. *)

  val of_string : string -> (t, string) result
  (** [of_string s] parses {!to_string}'s form (surrounding white space allowed). *)

  val load : string -> (t, string) result
  (** [load path] reads a key file; refuses one that another user could read or write (one line
      saying how to fix it). *)

  val save : string -> t -> (unit, string) result
  (** [save path k] writes [k] to a new file readable by its owner only (mode 0600); refuses to
      overwrite an existing file. *)

  val load_or_create : ?g:Mirage_crypto_rng.g -> string -> (t, string) result
  (** [load_or_create path] loads the key at [path], or generates one and saves it there if the file
      does not exist. *)
end

val verify : t -> public:string -> signature:string -> string -> bool
(** [verify port ~public ~signature msg] is [true] when [public] is the key of [port] and
    [signature] is its valid signature of [msg]. *)
