(** Capabilities: Amoeba's port | object | rights | check, with a modern check.

    A capability names one object of one server and says what its holder may do with it. It is a
    bearer token: whoever holds the bytes holds the rights, so capabilities travel only inside the
    secure wire ({!Consort_cap}'s RPC) and are stored like passwords.

    {1 Checks}

    Each object has a random {!Secret.t} known only to its server. The object key is
    [K = HMAC-SHA256(secret, "consort-cap-v1-owner" ‖ port ‖ object)] truncated to 16 bytes. The
    owner capability carries all rights and [check = K]; a capability with fewer rights [r] carries
    [check = HMAC-SHA256(K, "consort-cap-v1-rights" ‖ r)] truncated to 16 bytes. So:

    - the owner can make restricted capabilities by itself ({!restrict}), as in Amoeba, where the
      owner's check was the random C and a restricted one F(C xor rights);
    - the holder of a restricted capability cannot widen it: that needs K, and HMAC is one-way; it
      asks the server ([std_restrict]) to narrow it further;
    - changing an object's secret ({!Secret.generate} again) revokes every capability for it at
      once.

    Servers check every capability they receive with {!validate}.

    {1 Binary form (version 1, 40 bytes)}

    {v
    offset size field
    0      1    version = 1
    1      16   port      (Port.t: digest of the server's Ed25519 key)
    17     6    object    (48-bit unsigned, big-endian)
    23     1    rights    (Rights.t)
    24     16   check     (truncated HMAC-SHA256, see above)
    v}

    Amoeba's capability was 128 bits: a 48-bit port, a 24-bit object number, 8 bits of rights and a
    48-bit check made with a DES-derived one-way function. The fields map one to one: the port grows
    to 128 bits and is bound to a signing key (any machine could claim an Amoeba port), the object
    number to 48 bits, rights stay 8 bits with the same meaning, and the check grows to 128 bits of
    HMAC-SHA256. The leading version byte lets a later format coexist.

    {1 Text form}

    ["cap1:"] followed by the 40 bytes in base64url without padding, for shells and files:
    {!to_string} and the total {!of_string}. *)

type t = private { port : Port.t; obj : int; rights : Rights.t; check : string }
(** [obj] is in \[0, 2{^ 48}); [check] has {!check_length} bytes. *)

val check_length : int
(** 16 bytes (128 bits). *)

val max_object : int
(** 2{^ 48} - 1. *)

val length : int
(** Bytes of the binary form: 40. *)

val version : int
(** 1. *)

(** Per-object secrets, known only to the server. *)
module Secret : sig
  type t

  val generate : ?g:Mirage_crypto_rng.g -> unit -> t
  (** 32 random bytes. *)

  val to_raw : t -> string
  (** [to_raw s] is the 32 secret bytes, for the server's own storage. *)

  val of_raw : string -> (t, string) result
  (** [of_raw s] is the secret whose bytes are [s] (32 bytes). *)

  val equal : t -> t -> bool
end

val owner : Port.t -> obj:int -> Secret.t -> t
(** [owner port ~obj secret] is the owner capability of object [obj]: all rights.
    @raise Invalid_argument if [obj] is outside \[0, {!max_object}\]. *)

val make : Port.t -> obj:int -> Secret.t -> Rights.t -> t
(** [make port ~obj secret rights] is the capability for [obj] with exactly [rights] (the owner
    capability when [rights] is {!Rights.all}).
    @raise Invalid_argument if [obj] is outside \[0, {!max_object}\]. *)

val v : port:Port.t -> obj:int -> rights:Rights.t -> check:string -> (t, string) result
(** [v ~port ~obj ~rights ~check] assembles a capability from its fields, without checking [check]
    (only the server can). *)

val is_owner : t -> bool
(** [is_owner c] is [true] when [c] claims all rights (whether its check is good is for the server
    to say). *)

(** {1 Restricting} *)

type restrict_error =
  [ `Needs_server  (** [c] is not an owner capability: ask its server (std_restrict) *) ]

val restrict : t -> Rights.t -> (t, [> restrict_error ]) result
(** [restrict c mask] is [c] with rights [c.rights ∩ mask], computed locally. Works for an owner
    capability (and trivially when the result has [c]'s own rights); otherwise
    [Error `Needs_server]. The result is valid exactly when [c] is. *)

val restrict_with_secret : Secret.t -> t -> Rights.t -> t
(** [restrict_with_secret secret c mask] is what a server answers to std_restrict once it has
    validated [c]: the capability for [c]'s object with rights [c.rights ∩ mask]. *)

(** {1 Validating} *)

type error =
  [ `Capbad  (** STD_CAPBAD: the check does not match (forged, altered, revoked) *)
  | `Denied  (** STD_DENIED: a good capability without the rights asked for *) ]

val pp_error : [< error ] Fmt.t

val validate : Secret.t -> ?port:Port.t -> need:Rights.t -> t -> (unit, [> error ]) result
(** [validate secret ?port ~need c] is [Ok ()] when [c]'s check is right for [secret] (and [c.port]
    is [port] when given) and [c.rights] include [need]. The check is compared in constant time; a
    bad check is [`Capbad] whatever the rights. *)

(** {1 Encoding} *)

type decode_error =
  [ `Bad_version of int  (** a version this code does not know *)
  | `Bad_length of int  (** not {!length} bytes *)
  | `Bad_text of string  (** the text form is malformed: why *) ]

val pp_decode_error : decode_error Fmt.t

val to_raw : t -> string
(** [to_raw c] is the 40-byte binary form. *)

val of_raw : string -> (t, decode_error) result
(** [of_raw s] decodes the binary form. Total. *)

val codec : t Consort.Codec.t
(** The binary form as a codec, for message headers. *)

val to_string : t -> string
(** [to_string c] is ["cap1:"] and base64url of {!to_raw}. *)

val of_string : string -> (t, decode_error) result
(** [of_string s] parses {!to_string}'s form; surrounding white space is ignored. Total: any input
    gives [Ok] or a [decode_error]. *)

val equal : t -> t -> bool

val pp : t Fmt.t
(** [pp] prints port, object and rights, never the check. *)

val pp_text : t Fmt.t
(** [pp_text] prints {!to_string}. *)

val digest : t -> string
(** [digest c] names [c] in logs without giving it away: port, object and rights as {!pp}, then
    ["#"] and the first 8 bytes of the SHA-256 of {!to_raw}, in hex. *)
