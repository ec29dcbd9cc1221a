(** The parameters of TCP over IP ({!Consort_net.Tcp.Make}'s second argument) that the network tests
    each wrote out: port 6 of the IP version, its pseudo-header checksum, its addresses. *)

open Consort_net

val ipv4 :
  clock:Clock.t ->
  pool:Consort.Pool.t ->
  rng:Consort.Rng.t ->
  Ipv4_addr.t ->
  (module Tcp.PARAMS
     with type host = Ipv4_addr.t
      and type lower_address = Ipv4.address
      and type lower_pattern = Ipv4.address_pattern)
(** [ipv4 ~clock ~pool ~rng local]: TCP at [local] over IPv4. *)

val ipv6 :
  clock:Clock.t ->
  pool:Consort.Pool.t ->
  rng:Consort.Rng.t ->
  Ipv6_addr.t ->
  (module Tcp.PARAMS
     with type host = Ipv6_addr.t
      and type lower_address = Ipv6.address
      and type lower_pattern = Ipv6.address_pattern)
(** The same over IPv6. *)
