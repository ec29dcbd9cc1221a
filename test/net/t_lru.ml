(* The bounded caches that hold what strangers make the stack remember. *)

open Consort_net

let keys t = Lru.fold (fun k _ acc -> k :: acc) t [] |> List.rev

let lru_order () =
  let evicted = ref [] in
  let t = Lru.create ~on_evict:(fun k v -> evicted := (k, v) :: !evicted) 3 in
  Lru.add t 1 "a";
  Lru.add t 2 "b";
  Lru.add t 3 "c";
  Alcotest.(check (list int)) "most recent first" [ 3; 2; 1 ] (keys t);
  Alcotest.(check (option string)) "find" (Some "a") (Lru.find t 1);
  Alcotest.(check (list int)) "find marks used" [ 1; 3; 2 ] (keys t);
  Alcotest.(check (option string)) "peek" (Some "b") (Lru.peek t 2);
  Alcotest.(check (list int)) "peek does not" [ 1; 3; 2 ] (keys t);
  Lru.add t 4 "d";
  Alcotest.(check (list (pair int string))) "the least recently used went" [ (2, "b") ] !evicted;
  Alcotest.(check (list int)) "bounded" [ 4; 1; 3 ] (keys t);
  Lru.add t 3 "C";
  Alcotest.(check (list int)) "replacing marks used, evicts nothing" [ 3; 4; 1 ] (keys t);
  Alcotest.(check (option string)) "replaced" (Some "C") (Lru.peek t 3);
  Lru.remove t 4;
  Alcotest.(check (list int)) "removed" [ 3; 1 ] (keys t);
  Alcotest.(check int) "remove is not eviction" 1 (Lru.evicted t);
  Lru.remove t 1;
  Lru.remove t 3;
  Alcotest.(check int) "empty" 0 (Lru.length t);
  Lru.add t 9 "z";
  Alcotest.(check (list int)) "usable after emptying" [ 9 ] (keys t)

let lru_idle () =
  let now = ref 0 in
  let t = Lru.create ~idle:10 ~now:(fun () -> !now) 100 in
  Lru.add t 1 ();
  now := 5;
  Lru.add t 2 ();
  now := 8;
  ignore (Lru.find t 1);
  now := 16;
  Lru.add t 3 ();
  Alcotest.(check (list int)) "2 idle since 5: dropped at 16" [ 3; 1 ] (keys t);
  now := 30;
  Lru.expire t;
  Alcotest.(check int) "all idle" 0 (Lru.length t);
  Alcotest.(check int) "three dropped" 3 (Lru.evicted t)

(* A model check: against a list kept in recency order. *)
let lru_model =
  Util.qtest ~count:300 "random operations agree with a list model"
    QCheck.(list (pair (int_bound 3) (int_bound 20)))
    (fun ops ->
      let cap = 5 in
      let t = Lru.create cap in
      let model = ref [] in
      List.for_all
        (fun (op, k) ->
          (match op with
          | 0 | 1 ->
              Lru.add t k k;
              model := k :: List.filter (( <> ) k) !model;
              if List.length !model > cap then model := List.filteri (fun i _ -> i < cap) !model
          | 2 ->
              let r = Lru.find t k in
              if List.mem k !model then (
                assert (r = Some k);
                model := k :: List.filter (( <> ) k) !model)
              else assert (r = None)
          | _ ->
              Lru.remove t k;
              model := List.filter (( <> ) k) !model);
          keys t = !model && Lru.length t = List.length !model)
        ops)

let suite =
  [
    Alcotest.test_case "LRU: order, eviction, replace, remove" `Quick lru_order;
    Alcotest.test_case "LRU: idle entries dropped" `Quick lru_idle;
    lru_model;
  ]
