(* Deadlines against a model (an array of times scanned whole): random sets, clears and takes. A
   take must return every key due and none that is not, earliest first, ties by key. *)

open Consort
module D = Deadlines

let ops = QCheck.Gen.(list_size (int_range 1 300) (triple (int_range 0 9) (int_range 0 40) nat))

let same_as_scan =
  QCheck.Test.make ~count:2000 ~name:"Deadlines behaves as a scan of every key" (QCheck.make ops)
    (fun ops ->
      let n = 41 in
      let d = D.create n and model = Array.make n max_int in
      let buf = Array.make n (-1) in
      let now = ref 0 in
      List.for_all
        (fun (op, k, x) ->
          let ok =
            match op with
            | 0 | 1 | 2 | 3 ->
                let at = !now + (x mod 50) in
                D.set d k at;
                model.(k) <- at;
                true
            | 4 ->
                D.clear d k;
                model.(k) <- max_int;
                true
            | 5 | 6 | 7 ->
                now := !now + (x mod 20);
                let c = D.take_due d !now buf in
                let due =
                  List.sort compare
                    (List.filter_map
                       (fun k -> if model.(k) <= !now then Some (model.(k), k) else None)
                       (List.init n Fun.id))
                in
                List.iter (fun (_, k) -> model.(k) <- max_int) due;
                Array.to_list (Array.sub buf 0 c) = List.map snd due
            | 8 ->
                if x mod 7 = 0 then begin
                  D.reset d;
                  Array.fill model 0 n max_int
                end;
                true
            | _ -> true
          in
          let count = Array.fold_left (fun c t -> if t <> max_int then c + 1 else c) 0 model in
          ok
          && D.next d = Array.fold_left min max_int model
          && D.length d = count
          && List.for_all (fun k -> D.get d k = model.(k)) (List.init n Fun.id))
        ops)

(* A take visits only what is due: with thousands of keys set later, taking the one due leaves the
   others untouched and in order. *)
let only_due () =
  let n = 5000 in
  let d = D.create n and buf = Array.make n 0 in
  for k = 0 to n - 1 do
    D.set d k (1000 + k)
  done;
  D.set d 4321 10;
  Alcotest.(check int) "none due before" 0 (D.take_due d 9 buf);
  Alcotest.(check int) "one due" 1 (D.take_due d 10 buf);
  Alcotest.(check int) "the one" 4321 buf.(0);
  Alcotest.(check int) "next" 1000 (D.next d);
  Alcotest.(check int) "three more" 3 (D.take_due d 1002 buf);
  Alcotest.(check (list int)) "in order" [ 0; 1; 2 ] (Array.to_list (Array.sub buf 0 3));
  Alcotest.(check int) "left" (n - 4) (D.length d)

let tests =
  [
    Alcotest.test_case "as a scan, 2000 random runs" `Quick (fun () ->
        QCheck.Test.check_exn ~rand:(Random.State.make [| 5 |]) same_as_scan);
    Alcotest.test_case "a take visits only what is due" `Quick only_due;
  ]
