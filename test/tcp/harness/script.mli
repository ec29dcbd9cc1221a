(** A packetdrill-like script harness: one TCP stack under test, a scripted peer that injects
    segments at given virtual times and expects the stack's segments to match patterns, and
    application calls.

    A script is a list of lines [TIME EVENT], TIME absolute ([0.100]) or relative to the previous
    line ([+0.040]), in seconds. Events:
    - [< FLAGS S:E(N) [ack A] [win W] [<OPTIONS>]]: inject a segment (flags among [S F R P .], [.]
      for ACK; sequence numbers relative to the peer's ISN, ack relative to the stack's);
    - [> FLAGS S:E(N) [ack A] [win W] [<OPTIONS>|<...>]]: the next segment the stack sends must be
      sent at TIME and match (sequence numbers relative to the stack's ISN, ack to the peer's; [win]
      and options are checked when given);
    - [listen P], [connect P], [write N], [read N], [close], [shutdown], [abort], [nodelay],
      [autoconsume on|off]: application calls on the latest connection;
    - [expect state STATE], [expect status STATUS] (connected, writable, peer_closed, closed, reset,
      refused, timeout), [expect delivered N], [expect rto MS], [expect mss N] (payload per segment
      sent), [expect wscale SND RCV] (shifts, or [none]), [expect snd_wnd N], [expect cwnd N],
      [expect ssthresh N]. Options: [mss N], [wscale N], [sackOK], [nop], [TS val V ecr E] ([*] for
      any value; in an injected segment [ecr *] echoes the stack's last TSval), [sack S:E ...].

    Any segment the stack sends that no [>] line expects fails the script. *)

val run : ?config:Tcp.config -> ?tol:Consort.Time.t -> ?checksum:bool -> string -> unit
(** [run script] plays [script] against a fresh stack.
    @raise Failure naming the line that failed and why. *)
