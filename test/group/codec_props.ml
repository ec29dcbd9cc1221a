open Consort

let qtest ?(seed = 42) (QCheck2.Test.Test cell as t) =
  Alcotest.test_case (QCheck.Test.get_name cell) `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let round_trip name codec pp gen =
  QCheck.Test.make ~count:2000 ~name:(name ^ " header round trip")
    (QCheck.make ~print:(Fmt.to_to_string pp) gen)
    (fun h ->
      let s = Codec.encode_string codec h in
      String.length s = Codec.size codec h
      && match Codec.decode_string codec s with Ok h' -> h' = h | Error _ -> false)

let random_bytes name codec tags =
  let gen =
    QCheck.Gen.(
      oneof
        [
          string_size (int_bound 40);
          map2
            (fun t s -> String.make 1 (Char.chr t) ^ s)
            (oneofl tags)
            (string_size (int_bound 40));
        ])
  in
  QCheck.Test.make ~count:5000
    ~name:(name ^ " decodes random bytes totally")
    (QCheck.make ~print:(Printf.sprintf "%S") gen)
    (fun s ->
      (match Codec.decode codec (Cstruct.of_string s) 0 with Ok _ | Error _ -> ());
      match Codec.decode_string codec s with
      | Ok h -> Codec.encode_string codec h = s
      | Error _ -> true)
