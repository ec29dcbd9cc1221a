(* Helpers shared by the consort.net test suites. *)

open Consort

let seed = 0x5eed4

let qtest ?(count = 500) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let fresh_pool () =
  Iovec.set_checked true;
  Pool.create ~name:"test" ()

let no_leaks pool = Alcotest.(check int) "no leaks" 0 (Pool.leak_check pool)

let cs_of_list l =
  let b = Cstruct.create (List.length l) in
  List.iteri (Cstruct.set_uint8 b) l;
  b
