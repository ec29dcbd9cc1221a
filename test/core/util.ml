(* Helpers shared by the core test suites. *)

open Consort

let seed = 0x5eed

let qtest ?(count = 500) name arb prop =
  let t = QCheck.Test.make ~count ~name arb prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let fresh_pool ?segment_size ?max_free () =
  Iovec.set_checked true;
  Pool.create ?segment_size ?max_free ~name:"test" ()

let no_leaks pool = Alcotest.(check int) "no leaks" 0 (Pool.leak_check pool)

let raises_uar name f =
  match f () with
  | _ -> Alcotest.failf "%s: expected Use_after_release" name
  | exception Iovec.Use_after_release _ -> ()

let raises_invalid name f =
  match f () with
  | _ -> Alcotest.failf "%s: expected Invalid_argument" name
  | exception Invalid_argument _ -> ()

let contains ~sub s =
  let n = String.length sub and m = String.length s in
  let rec go i = i + n <= m && (String.sub s i n = sub || go (i + 1)) in
  go 0

let check_contains what ~sub s =
  if not (contains ~sub s) then Alcotest.failf "%s: %S does not contain %S" what s sub
