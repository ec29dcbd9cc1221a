(** The RPC protocol's datagrams, as typed values with total codecs.

    Every datagram starts with a version byte (1) and a kind. Only handshakes, locates and session
    errors travel in clear, and they hold nothing secret (ports are public); the answers among them
    are signed with the port's key; everything about a transaction (headers with their capabilities,
    data) is an [inner] message sealed in a [Data] datagram by the session's AEAD ({!Secure}). *)

type outer =
  | Hello of { port : Port.t; eph : string; nonce : string }
      (** client → server: open a session with [port]'s server; [eph] is the client's X25519 share
          (32 bytes), [nonce] 16 random bytes *)
  | Hello_ack of {
      nonce : string;
      session : string;
      eph : string;
      public : string;
      signature : string;
    }
      (** server → client: the session id (8 bytes), the server's X25519 share, its Ed25519 public
          key and its signature of the handshake *)
  | Nothere of { port : Port.t; nonce : string }
      (** server → client: nothing here serves [port] (answer to a [Hello]) *)
  | Data of { up : bool; session : string; seq : int64; sealed : string }
      (** an [inner] message sealed under the session's key for this direction, with sequence number
          [seq]; [up] is client → server *)
  | Badsession of { port : Port.t; session : string; public : string; signature : string }
      (** server → client: no such session here (the server restarted or forgot it); signed with the
          key of [port] (its Ed25519 public key, then its signature of the port and the session), so
          that only the port's server can end a session: a client believes it only for a session it
          opened with [port] *)
  | Locate of { port : Port.t; nonce : string }  (** client → anyone: who serves [port]? *)
  | Hereis of { port : Port.t; nonce : string; public : string; signature : string }
      (** server → client: I do; signed over the port and the nonce *)

val outer : outer Consort.Codec.t

(** Which message of a transaction a fragment or an ack is about. *)
type dir = Req | Rep

type inner =
  | Frag of {
      dir : dir;
      xid : int;
      total : int;
      offset : int;
      header : Header.t option;
      chunk : string;
    }
      (** the bytes from [offset] up to, not including, [offset + length chunk] of a message of
          [total] bytes; the fragment at offset 0 carries the header *)
  | Ack of { dir : dir; xid : int; upto : int }  (** the first [upto] bytes arrived *)
  | Enquire of { xid : int; have : int }
      (** client: where is [xid]? ([have] reply bytes arrived so far) *)
  | Alive of { xid : int }  (** server: [xid] arrived and is being carried out *)
  | Unknown of { xid : int }  (** server: [xid] never arrived (in this session) *)
  | Busy of { xid : int }  (** server: no room for [xid]; it will not be carried out *)
  | Forgotten of { xid : int }  (** server: [xid] was carried out but its reply was dropped *)
  | Done of { xid : int }  (** client: the reply of [xid] arrived whole *)
  | Moved of { xid : int }
      (** server: the port is no longer served here; [xid] was not carried out (locate it again) *)

val inner : inner Consort.Codec.t

val max_chunk : int
(** The largest fragment chunk a decoder accepts: 65536 bytes. *)

val pp_dir : dir Fmt.t
val pp_inner : inner Fmt.t
val pp_outer : outer Fmt.t

(** {1 The fast path}

    The same bytes as [outer] and [inner] give, without intermediate strings, for the datagrams that
    carry data. *)

val frag_cstruct :
  ?into:Cstruct.t ->
  headroom:int ->
  dir:dir ->
  xid:int ->
  total:int ->
  offset:int ->
  header:Header.t option ->
  string ->
  off:int ->
  len:int ->
  Cstruct.t
(** [frag_cstruct ~headroom ... data ~off ~len] is [headroom] unspecified bytes and then the [inner]
    encoding of the [Frag] whose chunk is the bytes from [off] up to, not including, [off + len] of
    [data]. With [into] large enough, the bytes are written at the start of [into] and the result is
    a view of it (valid until [into] is written again). *)

val frag_head :
  into:Cstruct.t ->
  dir:dir ->
  xid:int ->
  total:int ->
  offset:int ->
  header:Header.t option ->
  len:int ->
  Cstruct.t
(** [frag_head ~into ...] is the prefix alone of the fragment that [frag_cstruct] makes (its chunk
    of [len] bytes to follow), written at the start of [into] (or in a fresh buffer if [into] is too
    short). *)

val peek_frag : Cstruct.t -> (dir * int * int * int * Header.t option * Cstruct.t) option
(** [peek_frag cs] is [Some (dir, xid, total, offset, header, chunk)] when [cs] is exactly the
    [inner] encoding of a [Frag] (the chunk shares [cs]'s memory), [None] otherwise (then decode it
    with [inner]). *)

val peek_frag_head :
  Cstruct.t -> plain_len:int -> (dir * int * int * int * Header.t option * int * int) option
(** [peek_frag_head head ~plain_len]: the first bytes of a fragment of [plain_len] bytes in all, if
    they hold its whole prefix: direction, xid, total, offset, header, the chunk's length and where
    the chunk starts. *)

val data_header_length : int
(** 18: version, kind, session and sequence number of a [Data] datagram. *)

val data_header : up:bool -> session:string -> seq:int64 -> Bytes.t
(** The first {!data_header_length} bytes of a [Data] datagram. *)

val peek_data : Cstruct.t -> (bool * string * int64 * Cstruct.t) option
(** [peek_data cs] is [Some (up, session, seq, sealed)] when [cs] is a [Data] datagram ([sealed]
    shares [cs]'s memory), [None] otherwise. *)
