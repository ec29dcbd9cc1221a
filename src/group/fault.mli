(** Fault layers (property [Debug]): what arrives at a member is dropped, delayed (and so
    reordered), duplicated or cut off by a partition, as tunables say, to test an application on a
    real network. They sit just above Bottom, under the failure detector and the reliable layers,
    and act on received datagrams only; by default they let everything through.

    Their choices are drawn from [fault.seed] with the view and the member's rank (0, the default:
    the stack's own generator), so that a run can be repeated. Tunables: [drop.rate], [dup.rate],
    [delay.rate] with [delay.min], [delay.max] and [delay.queue] (datagrams held at most), and
    [partition.sets]: ["A+B/C"] puts members A and B in one set and C in another (a member is named
    by [ADDR:PORT] or its id; members named nowhere form one more set); a member drops every
    datagram of the stack from members of other sets. The side channel (discovery and merges) is not
    cut: with [Heal], members of two sets merge again and are excluded again, as over a network that
    carries only some traffic; without [Heal] the group stays split. *)

module Param : sig
  val seed : string
  val drop : string
  val dup : string
  val delay : string
  val delay_min : string
  val delay_max : string
  val delay_queue : string
  val partition : string
end

val parse_sets : string -> string list list
(** ["a+b/c"] is [[["a"; "b"]; ["c"]]]; [""] is [[]]. *)

val drop : Consort.Layer.t
val dup : Consort.Layer.t
val delay : Consort.Layer.t
val partition : Consort.Layer.t
