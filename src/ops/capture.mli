(** A transport that records every datagram it sends and receives in a pcap file, for tcpdump,
    tshark or Wireshark ([consort member --pcap FILE]). Each record is an IPv4 packet (LINKTYPE_RAW)
    with a UDP header made from the datagram's source and destination ["IP:PORT"]; the payload is
    exactly what went on the wire (sealed, when the group is).

    The file is bounded: once [limit] bytes are written, recording stops with one warning (the
    member goes on). A write error (a full disk, an I/O error) stops recording for good and is kept
    in {!error}: its owner stops ([consort member] and [consortd] leave their groups and exit 2). *)

type writer

val create : ?limit:int -> string -> (writer, string) result
(** [create path] creates [path] (mode 0600; refused if it exists) and writes the pcap header to it
    (refused, and nothing left behind, if the disk takes nothing). [limit] defaults to 1 GiB. *)

val records : writer -> int

val error : writer -> string option
(** [error w] is the write error that stopped [w] (the first), if any; [None] while it records, and
    after it stopped at its limit. *)

val close : writer -> unit
(** [close w] flushes and closes; an error doing so is kept in {!error}. *)

val record : writer -> src:string -> dst:string -> Cstruct.t list -> unit
(** [record w ~src ~dst pieces] appends one datagram from [src] to [dst] (["IP:PORT"]; a datagram
    whose addresses are not IPv4 is skipped). *)

module Make (T : Consort.Transport.S) : sig
  include Consort.Transport.S with type address = T.address and type timer = T.timer

  val wrap : T.t -> writer option -> t
  (** [wrap inner (Some w)] records into [w]; [wrap inner None] adds nothing. *)
end
