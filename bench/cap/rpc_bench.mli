(** [consort bench rpc]: the capability RPC beside raw UDP, in one run.

    Both sides run in one process on one event loop over kernel UDP on 127.0.0.1, so the RPC and its
    baselines share the same placement:
    - null RPC latency (an empty request and reply, encrypted, at most once) beside a raw UDP round
      trip of an empty datagram;
    - 1 MB [trans] throughput (a 1 MB request, an empty reply) beside raw UDP one-way throughput of
      8 KB datagrams (the trans itself uses the default configuration: 60 KB fragments on loopback;
      and 8 KB ones, as between machines, for comparison). Each round measures every figure and its
      baseline; each comparison is printed from its median round, with the ratio, and beside it what
      bounds the ratio: the AEAD's own rate and raw UDP at the fragment size, measured in the same
      round. Then the 1 MB [trans] with the server in a process of its own beside the byte limit:
      raw UDP in C with 60,000-byte datagrams from one process to another, [sendmmsg]/[recvmmsg] and
      a credit window (bench/peers' [udp_raw flow], lossless), in the same round; the ratio is
      printed and kept in the JSON ([--json], [--save DIR]). Then the same null call and 1 MB
      request with gRPC (a Go program in [bench/cap/grpc], built by the benchmark from the Go module
      proxy), over plain TCP and over TLS 1.3: in the same placement (client and server in one
      process, [GOMAXPROCS=1]: one thread runs Go code, as one event loop runs ours), then as Go
      runs by default, on every core. *)

type figures = {
  null_us : float;  (** median null RPC of the round, microseconds *)
  raw_rtt_us : float;  (** median raw UDP round trip of the round *)
  trans_mbps : float;
      (** 1 MB trans, MB/s (10{^ 6} bytes), default configuration (on loopback: [loopback_fragment]
          fragments) *)
  trans_cpu_mbps : float;  (** the same per second of this process's CPU time (user and system) *)
  trans_lan_mbps : float;  (** 1 MB trans with 8 KB fragments, as between machines *)
  trans_lan_cpu_mbps : float;
  raw_mbps : float;  (** raw UDP one-way, 8 KB datagrams, MB/s *)
  raw_cpu_mbps : float;  (** the same per second of CPU time: other load changes it little *)
  raw_big_cpu_mbps : float;
      (** raw UDP one-way with datagrams of the loopback fragment size, per second of CPU *)
  gcm_mbps : float;
      (** AES-256-GCM as the wire runs it (OpenSSL, {!Consort_crypto.Gcm}) sealing then opening
          messages of the loopback fragment size, per second of CPU: with the raw UDP rate, the
          ceiling of a transfer whose every byte is sealed and opened in this one process *)
  gcm_mirage_mbps : float;  (** mirage-crypto's AES-256-GCM, the same *)
  chacha_mbps : float;  (** ChaCha20-Poly1305 (mirage-crypto), the same *)
  chacha_evp_mbps : float;
      (** ChaCha20-Poly1305 from OpenSSL ({!Consort_crypto.Chacha}, the group seal's), the same *)
  chacha_1k_mbps : float;  (** mirage-crypto's ChaCha20-Poly1305 on 1 KB messages *)
  chacha_evp_1k_mbps : float;  (** OpenSSL's on 1 KB messages *)
  trans_2p_mbps : float;
      (** 1 MB trans, default configuration, with the server in a process of its own (forked by the
          benchmark), MB/s of wall time *)
  trans_2p_client_cpu_ms : float;  (** CPU time of the client per MB of that trans, ms *)
  trans_2p_server_cpu_ms : float;
      (** CPU time of the server process per MB, ms (it answers a call for it) *)
  byte_limit_mbps : float;
      (** the byte limit: raw UDP in C ([bench/peers/udp_raw.c]'s [flow]: 60,000-byte datagrams,
          [sendmmsg]/[recvmmsg], a credit window, lossless), one sender process and one receiver
          process, payload MB/s of wall time; measured in slices alternating with those of
          [trans_2p_mbps] *)
  byte_limit_cpu_ms : float;  (** the raw flow's CPU time per MB, both processes *)
}

val run :
  ?calls:int -> ?transfers:int -> ?rounds:int -> ?slices:int -> unit -> (figures, string) result
(** [run ()] times [rounds] rounds, each with every figure and its baseline, and is the round with
    the median throughput ratio (all rounds are kept for {!cmd}'s printout). The byte limit's raw
    flow (4000 datagrams) and the trans with the server in its own process alternate in [slices]
    slices in each round (default 5). *)

val flow_result : string -> (float, string) result
(** [flow_result line] is the payload MB/s of a [udp_raw flow] result line, if the flow was lossless
    (no datagram lost, no member late); an error naming what was lost, or what was unexpected,
    otherwise: a lossy flow is not the byte limit. *)

val gcm_seal : ?size:int -> int -> float
(** [gcm_seal bytes] seals [bytes] in messages of [size] bytes (default 61440) with the wire's
    AES-256-GCM (OpenSSL) and is the rate per second of CPU, MB/s: what one side of an encrypted
    transfer can do at best. *)

val cmd : int Cmdliner.Cmd.t
