(** A transport that records every datagram it sends and receives in a pcap file, for tcpdump,
    tshark or Wireshark ([consort member --pcap FILE]). Each record is an IPv4 packet (LINKTYPE_RAW)
    with a UDP header made from the datagram's source and destination ["IP:PORT"]; the payload is
    exactly what went on the wire (sealed, when the group is).

    The file is bounded: once [limit] bytes are written, recording stops with one warning; a write
    error (a full disk) stops it the same way. Neither ever stops the member. *)

type writer

val create : ?limit:int -> string -> (writer, string) result
(** [create path] creates [path] (mode 0600; refused if it exists) and writes the pcap header.
    [limit] defaults to 1 GiB. *)

val records : writer -> int
val close : writer -> unit

val record : writer -> src:string -> dst:string -> Cstruct.t list -> unit
(** [record w ~src ~dst pieces] appends one datagram from [src] to [dst] (["IP:PORT"]; a datagram
    whose addresses are not IPv4 is skipped). *)

module Make (T : Consort.Transport.S) : sig
  include Consort.Transport.S with type address = T.address and type timer = T.timer

  val wrap : T.t -> writer option -> t
  (** [wrap inner (Some w)] records into [w]; [wrap inner None] adds nothing. *)
end
