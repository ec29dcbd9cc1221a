(** Properties every layer header codec must have, for the layer tests. *)

val qtest : ?seed:int -> QCheck2.Test.t -> unit Alcotest.test_case
(** [qtest t] runs QCheck test [t] as an Alcotest case, seeded. *)

val round_trip : string -> 'a Consort.Codec.t -> 'a Fmt.t -> 'a QCheck.Gen.t -> QCheck2.Test.t
(** Encoding a header gives [size] bytes that decode to the same header. *)

val random_bytes : string -> 'a Consort.Codec.t -> int list -> QCheck2.Test.t
(** Arbitrary bytes, half of them starting with one of the given tags, decode to an error or to a
    header whose encoding is exactly those bytes; decoding never raises. *)
