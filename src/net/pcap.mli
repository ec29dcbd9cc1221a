(** A device wrapper that records every frame, both ways, in a pcap file (nanosecond timestamps from
    the clock, LINKTYPE_ETHERNET), which tshark, tcpdump and Wireshark read. *)

type writer

val create : clock:Clock.t -> string -> writer
(** [create ~clock path] opens [path] for writing and writes the file header. *)

val of_channel : clock:Clock.t -> out_channel -> writer

val record : writer -> Cstruct.t -> unit
(** [record w frame] appends one frame, stamped with the clock's time. *)

val close : writer -> unit
(** [close w] flushes and closes the file. *)

val frames : writer -> int
(** Frames written so far. *)

val wrap : writer -> Device.t -> Device.t
(** [wrap w dev] is [dev] with each frame sent or received recorded. *)

(** Reading pcap files back (little-endian files, as {!create} writes). *)
module Reader : sig
  val read : string -> ((Consort.Time.t * string) list, [ `Msg of string ]) result
  (** [read path] is every frame in the file with its time stamp. *)
end
