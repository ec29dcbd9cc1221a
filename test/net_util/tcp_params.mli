(** The parameters of TCP over IP ({!Consort_net.Tcp.Make}'s second argument) that the network tests
    each wrote out: protocol 6 of the IP version, its pseudo-header checksum, its addresses. *)

open Consort_net

type ('host, 'address, 'pattern) t =
  (module Tcp.PARAMS
     with type host = 'host
      and type lower_address = 'address
      and type lower_pattern = 'pattern)

type ('host, 'address, 'pattern) make =
  clock:Clock.t ->
  pool:Consort.Pool.t ->
  rng:Consort.Rng.t ->
  'host ->
  ('host, 'address, 'pattern) t
(** [make ~clock ~pool ~rng local]: TCP at [local]. *)

val ipv4 : (Ipv4_addr.t, Ipv4.address, Ipv4.address_pattern) make
val ipv6 : (Ipv6_addr.t, Ipv6.address, Ipv6.address_pattern) make
