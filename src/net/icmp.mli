(** ICMP (RFC 792) over IPv4: echo requests answered (in place, without a copy), echo sessions for
    ping, and errors received passed to the connection they are about.

    A connection is an echo session with one destination and identifier: [send] sends an echo
    request carrying the packet as its payload, with the session's next sequence number (from 0).
    Each matching echo reply is reported by the [status] upcall ({!Echo_reply}, with the round trip
    time) and then handed to [receive] with the ICMP header pulled. *)

type address = { dst : Ipv4_addr.t; id : int }

(** Passive opens are not supported: echo requests are answered by the layer itself. *)
type address_pattern = |

type status =
  | Echo_reply of { seq : int; rtt : Consort.Time.t }
  | Icmp_error of Icmp_packet.t  (** an ICMP error about this session's requests *)

type control = Replies of bool  (** answer echo requests (default [true]) *)

type info = {
  echo_requests_in : int;
  echo_replies_out : int;
  echo_requests_out : int;
  echo_replies_in : int;
  errors_in : int;  (** destination unreachable, time exceeded *)
  bad : int;  (** short or bad checksum *)
  unmatched : int;  (** replies for no session, other types *)
}

val pp_info : info Fmt.t

module type S = sig
  include
    Protocol.S
      with type address = address
       and type address_pattern = address_pattern
       and type status = status
       and type control = control
       and type info = info

  type ip

  val create : clock:Clock.t -> ip -> t
  (** [create ~clock ip] runs ICMP over [ip] (a passive open of protocol 1); [clock] times round
      trips. *)
end

module Make (Ip : Ipv4.S) : S with type ip = Ip.t
