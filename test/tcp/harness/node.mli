(** Test stacks: a TCP instance and its sockets on a {!Mem} host. *)

module type S = sig
  module T : Tcp.S with type host = int and type lower = Mem.t
  module Sock : module type of Socket.Make (T)

  val tcp : T.t
  val mem : Mem.t
end

val make :
  ?config:Tcp.config ->
  ?secret:string ->
  ?checksum:bool ->
  ?mtu:int ->
  Mem.net ->
  Consort.Pool.t ->
  int ->
  seed:int ->
  (module S)
(** [make net pool host ~seed] attaches [host] to [net] and runs TCP on it; [secret] is the key of
    its ISNs and ports ({!Tcp_secret.create}). *)
