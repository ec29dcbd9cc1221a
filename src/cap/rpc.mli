(** Amoeba's RPC over any Consort transport: [trans] for clients, [getreq] and [putrep] for servers,
    located by port, at most once, encrypted.

    {1 Model}

    A {e node} is one transport connection (one address). Any node can be a client; a node also
    serves the ports whose keys it is given ([serve]). A client addresses a request to a
    capability's port, never to an address: the node finds the port by asking ({e locate}: a
    [Locate] datagram to the configured addresses and the multicast group, answered only by a
    process that signs with the port's key), caches the answer (bounded, with a lifetime) and
    forgets it when the server says it is not there any more or falls silent; servers can therefore
    move or be replicated (several nodes with the same key).

    Each (server address, port) pair a client talks to gets a {e session}: a handshake pinned by the
    port (see {!Secure}), then every message sealed with AES-256-GCM. Capabilities and data never
    travel in clear. A session also names one incarnation of the server: a server that restarts has
    forgotten its sessions and answers [Badsession].

    {1 At most once}

    Transactions on one session are carried out one at a time, with transaction ids that only grow.
    The server keeps, per session, the last id it accepted and its state (being received, being
    carried out, replied with the reply kept until the client confirms it), so a retransmitted or
    replayed request is never carried out twice. The client does not retransmit blindly: when a
    reply is late it sends an [Enquire]; the server answers that the request is being carried out
    ([Alive]: the client then probes at the [alive] interval while it waits), how much of it arrived
    (the client resumes from there), the reply again, or that it never saw it (only then is it sent
    again).

    A transaction ends with the reply, or with an {!Rpc_error.t} that says whether the request may
    have been carried out ({!Rpc_error.outcome}). When the server restarts or falls silent after the
    request may have reached it, a request marked [~idempotent:true] is sent again on a new session;
    any other ends with [`Failure] (outcome unknown): it is never silently retried.

    {1 Large messages}

    Requests and replies up to [max_message] bytes are cut into fragments of [fragment] bytes, at
    most [window] fragments in flight beyond what the receiver acknowledged (go-back-N on a gap),
    the receiver acknowledging each eighth of a window; to a peer on the loopback network
    ([127.0.0.0/8]) [loopback_fragment] and [loopback_window] apply instead, when the transport's
    datagrams can hold such fragments. Nothing is ever cut short silently: a message is delivered
    whole or the transaction fails.

    {1 Bounds}

    Everything a stranger can make a node keep is bounded: server sessions ([max_sessions], the
    least recently used idle one goes), bytes held in requests being received and replies kept
    ([max_buffered]; a request that does not fit is refused with [Busy], a kept reply may be
    dropped, answered by [Forgotten]), requests waiting for [getreq] ([max_queued], refused with
    [Busy]), the locate cache and the transactions waiting in a client. *)

type config = {
  fragment : int;  (** data bytes per fragment (default 8192) *)
  window : int;  (** fragments in flight (default 64) *)
  loopback_fragment : int;
      (** data bytes per fragment to a peer on 127.0.0.0/8, where a datagram is never cut into
          frames (default 61440; 0: [fragment]) *)
  loopback_window : int;  (** fragments in flight to a peer on 127.0.0.0/8 (default 16) *)
  retransmit : Consort.Time.t;  (** first enquiry or resend after this silence (default 30 ms) *)
  max_backoff : Consort.Time.t;  (** enquiries back off up to this interval (default 1 s) *)
  silence : Consort.Time.t;
      (** give up after this long without a word from the server (default 5 s) *)
  alive : Consort.Time.t;
      (** are-you-alive probe interval while the server works (default 500 ms) *)
  locate_timeout : Consort.Time.t;  (** wait this long for a locate answer (default 100 ms) *)
  locate_tries : int;  (** locate and handshake attempts (default 4) *)
  locate_ttl : Consort.Time.t;  (** a cached location is trusted this long (default 10 min) *)
  max_message : int;  (** largest request or reply (default 64 MiB) *)
  max_sessions : int;  (** server sessions kept (default 1024) *)
  max_buffered : int;
      (** server bytes in requests being received and replies kept (default 256 MiB) *)
  max_queued : int;  (** requests waiting for getreq, per port (default 64) *)
  max_cache : int;  (** locate cache entries (default 1024) *)
  max_pending : int;  (** client transactions not yet finished (default 4096) *)
}

val default_config : config

val config_of_params : Consort.Params.t -> config
(** [config_of_params p] is the configuration from the tunables [rpc.*] (registered with their
    defaults, listed by [consort params]) with [p]'s overrides, such as
    [Params.of_string "rpc.fragment=61440"]. *)

type stats = {
  executed : int;  (** requests handed to getreq *)
  duplicates : int;  (** request datagrams recognised as repeats *)
  refused_busy : int;  (** requests refused for lack of room *)
  bad_datagrams : int;  (** undecodable, unauthenticated or unexpected datagrams dropped *)
  rogue_answers : int;  (** locate answers and handshakes that failed verification *)
  forged_session_errors : int;
      (** session errors ([Badsession]) for a session of this node, from its server's address, not
          signed with the session's port key: dropped, the session goes on *)
  nothere_refuted : int;
      (** [Nothere] answers to a handshake of this node that a signed locate answer naming the same
          address refuted (forged, or stale): the handshake went on *)
  sessions : int;  (** server sessions open now *)
  buffered : int;  (** bytes held now (see [max_buffered]) *)
  cache : int;  (** locate cache entries now *)
  pending : int;  (** client transactions not yet finished *)
}

type call_error =
  [ `Rpc of Rpc_error.t  (** the transaction failed *)
  | `Status of Status.t  (** the server refused *) ]

val pp_call_error : call_error Fmt.t

val locate_list : ?arg:string -> unit -> string list
(** [locate_list ?arg ()] is the comma-separated list of locate addresses in [arg] (a [--locate]
    option) or else in the [CONSORT_LOCATE] environment variable; empty if neither is set. *)

module Make (T : Consort.Transport.S) : sig
  type node

  val create :
    ?config:config ->
    ?g:Mirage_crypto_rng.g ->
    ?pool:Consort.Pool.t ->
    ?locate:T.address list ->
    ?multicast:T.address ->
    T.t ->
    T.address ->
    (node, string) result
  (** [create tr addr] opens a node at [addr]. [locate] are the addresses asked where a port is
      (default: none); [multicast], a group joined to hear locates and asked as well. [g] is the
      random generator for keys and nonces (default: the system's; pass
      {!Consort_crypto.Crypto.deterministic} for reproducible simulations). *)

  val address : node -> T.address
  val transport : node -> T.t
  val connection : node -> T.connection
  val stats : node -> stats
  val config : node -> config

  val close : node -> unit
  (** [close n] closes the connection: unfinished transactions end with [`Aborted], servers stop. *)

  val is_closed : node -> bool

  (** {1 Clients} *)

  type reply = Header.t * string

  val trans :
    node ->
    ?idempotent:bool ->
    ?progress:([ `Sent | `Received ] -> int -> int -> unit) ->
    Header.t ->
    string ->
    ((reply, Rpc_error.t) result -> unit) ->
    unit
  (** [trans n hdr data k] sends the request [hdr], [data] to the server of [hdr.port] and calls [k]
      once with the reply or the error (never from inside [trans] itself unless it fails at once).
      [idempotent] (default [false]) allows resending on a new session after a server restart or
      silence. [progress] is called as the request's bytes are acknowledged ([`Sent done total]) and
      the reply's arrive ([`Received done total]), for progress bars. *)

  val forget : node -> Port.t -> unit
  (** [forget n port] drops the cached location of [port]. *)

  val locate : node -> Port.t -> ((T.address, Rpc_error.t) result -> unit) -> unit
  (** [locate n port k] finds an address serving [port] (from the cache or by asking) and calls [k].
  *)

  (** {1 Servers} *)

  type server

  type request
  (** One request handed to a server, to be answered once with {!putrep}. *)

  val serve : node -> Port.Key.t -> server
  (** [serve n key] makes [n] answer locates and handshakes for [key]'s port, and queue its requests
      for {!getreq}.
      @raise Invalid_argument if [n] already serves that port. *)

  val port : server -> Port.t

  val getreq : server -> (request -> unit) -> unit
  (** [getreq s k] calls [k] with the next request for [s] (at once if one is waiting).
      @raise Invalid_argument if a [getreq] is already waiting on [s]. *)

  val listen : server -> (request -> unit) -> unit
  (** [listen s f] calls [f] on every request, one after the other ([getreq] again after each). [f]
      may answer later, with {!putrep}. *)

  val putrep : request -> Header.t -> string -> unit
  (** [putrep r hdr data] sends the reply of [r]. A second reply, or one to a client that gave up or
      a server restarted, is dropped. *)

  val header : request -> Header.t
  val data : request -> string

  val client : request -> T.address
  (** Where the request came from (for logs). *)

  val stop : server -> unit
  (** [stop s] stops serving [s]'s port: locates are no longer answered, new handshakes get
      [Nothere]. *)

  (** {1 Standard operations} *)

  val serve_std : server -> Std.objects -> (request -> unit) -> unit
  (** [serve_std s objs f] is {!listen} that answers the standard operations itself ({!Std.handle})
      and hands [f] the other requests. *)

  val std_info : node -> Cap.t -> ((string, call_error) result -> unit) -> unit
  val std_status : node -> Cap.t -> ((string, call_error) result -> unit) -> unit

  val std_restrict : node -> Cap.t -> Rights.t -> ((Cap.t, call_error) result -> unit) -> unit
  (** Locally for an owner capability ({!Cap.restrict}), else by asking the server. *)

  val std_destroy : node -> Cap.t -> ((unit, call_error) result -> unit) -> unit
  (** Not idempotent: never resent after an unknown outcome. *)

  val std_touch : node -> Cap.t -> ((unit, call_error) result -> unit) -> unit
  val std_age : node -> Cap.t -> ((unit, call_error) result -> unit) -> unit

  (** {1 Blocking calls}

      For simple programs: each call runs the transport ([run_until tr cond] must drive it until
      [cond ()], such as [Consort_engine.Loop.run ~until]) until its answer is there. Not for use
      inside callbacks. *)
  module Blocking (W : sig
    val run_until : T.t -> (unit -> bool) -> unit
  end) : sig
    val trans :
      node ->
      ?idempotent:bool ->
      ?progress:([ `Sent | `Received ] -> int -> int -> unit) ->
      Header.t ->
      string ->
      (reply, Rpc_error.t) result

    val getreq : server -> request option
    (** [None] if the node closed while waiting. *)

    val locate : node -> Port.t -> (T.address, Rpc_error.t) result
    val std_info : node -> Cap.t -> (string, call_error) result
    val std_status : node -> Cap.t -> (string, call_error) result
    val std_restrict : node -> Cap.t -> Rights.t -> (Cap.t, call_error) result
    val std_destroy : node -> Cap.t -> (unit, call_error) result
    val std_touch : node -> Cap.t -> (unit, call_error) result
    val std_age : node -> Cap.t -> (unit, call_error) result
  end
end
