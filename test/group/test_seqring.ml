(* Seqring against a hash table as the model: random adds, removes and look-ups over a sliding
   range of numbers, with jumps that make it grow. *)

module R = Consort_group.Seqring

let ops = QCheck.Gen.(list_size (int_range 1 400) (pair (int_range 0 9) (int_range 0 60)))

let same_as_hashtbl =
  QCheck.Test.make ~count:2000 ~name:"Seqring behaves as a hash table of numbers" (QCheck.make ops)
    (fun ops ->
      let r = R.create ~size:4 (-1) and h = Hashtbl.create 16 in
      let base = ref 1000 in
      List.for_all
        (fun (op, k) ->
          let seq = !base + k in
          (match op with
          | 0 | 1 | 2 | 3 ->
              R.replace r seq (seq * 3);
              Hashtbl.replace h seq (seq * 3)
          | 4 | 5 | 6 ->
              R.remove r seq;
              Hashtbl.remove h seq
          | 7 ->
              (* The window moves on: what is below goes. *)
              base := !base + (k / 4);
              Hashtbl.filter_map_inplace (fun s v -> if s < !base then None else Some v) h;
              R.iter (fun s _ -> if s < !base then R.remove r s) r
          | 8 ->
              if k = 0 then begin
                R.reset r;
                Hashtbl.reset h
              end
          | _ -> ());
          let model = List.sort compare (Hashtbl.fold (fun s v acc -> (s, v) :: acc) h []) in
          let mine = List.rev (R.fold (fun s v acc -> (s, v) :: acc) r []) in
          R.length r = Hashtbl.length h
          && mine = model
          && List.for_all
               (fun d ->
                 let s = !base + d in
                 R.mem r s = Hashtbl.mem h s
                 && R.find_opt r s = Hashtbl.find_opt h s
                 && R.find r s = Option.value ~default:(-1) (Hashtbl.find_opt h s))
               [ -3; -1; 0; 1; 5; 30; 59; 61; 200 ])
        ops)

(* A window that slides far keeps the ring small: it grows with the span kept, not the numbers. *)
let bounded () =
  let r = R.create ~size:8 0 in
  for s = 0 to 1_000_000 do
    R.replace r s s;
    if s >= 10 then R.remove r (s - 10)
  done;
  Alcotest.(check int) "ten kept" 10 (R.length r);
  let words = Obj.reachable_words (Obj.repr r) in
  Alcotest.(check bool) (Printf.sprintf "small (%d words)" words) true (words < 200)

(* The span follows what is kept: once the low numbers went, a number that fits the ring with what
   is left takes a slot without the ring growing. *)
let span_shrinks () =
  let r = R.create ~size:8 0 in
  for s = 0 to 7 do
    R.replace r s s
  done;
  for s = 0 to 6 do
    R.remove r s
  done;
  let before = Obj.reachable_words (Obj.repr r) in
  R.replace r 14 14;
  Alcotest.(check int) "ring not grown" before (Obj.reachable_words (Obj.repr r));
  Alcotest.(check (list (pair int int)))
    "kept"
    [ (7, 7); (14, 14) ]
    (List.rev (R.fold (fun s v acc -> (s, v) :: acc) r []))

(* Msgring against a hash table of strings: messages of one slice (taken apart), of no body, and of
   two slices (kept whole), with headers; kept (with [replace] or [replace_head]), copied, replaced,
   released one by one or all below a number; every buffer comes back to the pool. *)
module M = Consort_group.Msgring
open Consort

let msg_ops = QCheck.Gen.(list_size (int_range 1 200) (pair (int_range 0 9) (int_range 0 40)))

let msgring_as_hashtbl =
  QCheck.Test.make ~count:300 ~name:"Msgring keeps messages as a hash table of their bytes"
    (QCheck.make msg_ops) (fun ops ->
      let pool = Pool.create () in
      let r = M.create ~size:2 () and h = Hashtbl.create 16 in
      let make seq =
        let body =
          match seq mod 3 with
          | 0 -> Iovecs.of_string pool (Printf.sprintf "body %d" seq)
          | 1 -> []
          | _ -> Iovecs.of_string pool "two " @ Iovecs.of_string pool (string_of_int seq)
        in
        let m = Msg.push Codec.varint seq (Msg.create body) in
        (m, Msg.to_string m)
      in
      (* For [replace_head]: a message of no pushed header (made, or received
         with its header pulled), or one with a header pushed. *)
      let make_bare seq =
        let m, s = make seq in
        match seq / 3 mod 3 with
        | 0 ->
            Msg.release m;
            let body =
              match seq mod 3 with
              | 0 -> Iovecs.of_string pool (Printf.sprintf "body %d" seq)
              | 1 -> []
              | _ -> Iovecs.of_string pool "two " @ Iovecs.of_string pool (string_of_int seq)
            in
            let m = Msg.create body in
            (m, Msg.to_string m)
        | 1 -> (
            let v = Msg.to_iovec pool m in
            Msg.release m;
            match Msg.pull Codec.varint (Msg.of_iovec v) with
            | Ok (_, m) -> (m, Msg.to_string m)
            | Error _ -> assert false)
        | _ -> (m, s)
      in
      let ok =
        List.for_all
          (fun (op, seq) ->
            (match op with
            | 0 | 1 | 2 | 3 ->
                let m, s = make seq in
                M.replace r seq m;
                Hashtbl.replace h seq s
            | 4 | 5 ->
                M.release r seq;
                Hashtbl.remove h seq
            | 6 ->
                if M.mem r seq then begin
                  (* A copy pushed on and released leaves the kept one as it was. *)
                  let c = Msg.push Codec.varint 99 (M.copy r seq) in
                  Msg.release c
                end
            | 8 ->
                let head =
                  if seq mod 4 = 0 then Bytes.empty else Bytes.of_string (Printf.sprintf "H%d" seq)
                in
                let m, s = make_bare seq in
                M.replace_head r seq head m;
                Hashtbl.replace h seq (Bytes.to_string head ^ s);
                (* The message stays the caller's: releasing it leaves the kept one. *)
                Msg.release m
            | 7 ->
                if seq = 0 then begin
                  M.reset r;
                  Hashtbl.reset h
                end
            | 9 ->
                let below = Hashtbl.fold (fun k _ acc -> if k < seq then k :: acc else acc) h [] in
                List.iter (Hashtbl.remove h) below;
                let k = M.release_below r seq in
                if k <> List.length below then
                  failwith
                    (Printf.sprintf "release_below %d: %d released, %d kept below" seq k
                       (List.length below))
            | _ -> ());
            let model = List.sort compare (Hashtbl.fold (fun k s acc -> (k, s) :: acc) h []) in
            let mine = List.rev (M.fold (fun k s acc -> (k, s) :: acc) r []) in
            M.length r = Hashtbl.length h
            && mine = model
            && List.for_all
                 (fun (k, s) ->
                   M.msg_length r k = String.length s
                   &&
                   let c = M.copy r k in
                   let same = Msg.to_string c = s in
                   Msg.release c;
                   same)
                 model)
          ops
      in
      M.reset r;
      ok && Pool.leak_check pool = 0 && (Pool.stats pool).segments_in_use = 0)

(* Releasing all below a number shrinks the span as releasing one by one does: a ring of 8 that
   kept 0 to 7 and released all below 7 takes 14 in without growing. *)
let msgring_span_shrinks () =
  let pool = Pool.create () in
  let r = M.create ~size:8 () in
  let m = Msg.create [ Pool.of_string pool "x" ] in
  for s = 0 to 7 do
    M.replace_head r s Bytes.empty m
  done;
  Alcotest.(check int) "seven released" 7 (M.release_below r 7);
  let before = Obj.reachable_words (Obj.repr r) in
  M.replace_head r 14 Bytes.empty m;
  Alcotest.(check int) "ring not grown" before (Obj.reachable_words (Obj.repr r));
  Alcotest.(check (list int)) "kept" [ 7; 14 ] (List.rev (M.fold (fun s _ acc -> s :: acc) r []));
  Alcotest.(check int) "none below 7" 0 (M.release_below r 7);
  Alcotest.(check int) "both below 15" 2 (M.release_below r 15);
  Alcotest.(check int) "empty" 0 (M.length r);
  Msg.release m;
  Alcotest.(check int) "every slice back" 0 (Pool.in_use pool)

(* Keeping a message of one slice makes nothing that outlives the call: the collector has nothing
   to promote from a full ring. *)
let msgring_no_heap () =
  let pool = Pool.create () in
  let r = M.create ~size:64 () in
  let body = Pool.of_string pool (String.make 100 'x') in
  let hdr = Bytes.of_string "HDR" in
  let keep seq = M.replace r seq (Msg.push_bytes hdr (Msg.create [ Iovec.retain body ])) in
  for s = 0 to 63 do
    keep s
  done;
  for s = 0 to 62 do
    M.release r s
  done;
  (* One kept: the segment and the header bytes, shared by all, are counted. *)
  let words = Obj.reachable_words (Obj.repr r) in
  for s = 64 to 126 do
    keep s
  done;
  let after = Obj.reachable_words (Obj.repr r) in
  Alcotest.(check bool)
    (Printf.sprintf "no more words reachable for 63 more messages kept (%d, then %d)" words after)
    true (after <= words);
  M.reset r;
  Iovec.release body

(* The fused path keeps each cast with [replace_head]: a message of one slice and no pushed header is
   kept without allocating (no message made, no slice handle). *)
let replace_head_allocates_nothing () =
  let pool = Pool.create () in
  let r = M.create ~size:64 () in
  let m = Msg.create [ Pool.of_string pool (String.make 100 'x') ] in
  let hdr = Bytes.of_string "HDR" in
  for s = 0 to 63 do
    M.replace_head r s hdr m
  done;
  for s = 0 to 63 do
    M.release r s
  done;
  let before = Gc.minor_words () in
  for s = 64 to 1063 do
    M.replace_head r s hdr m;
    M.release r (s - 32)
  done;
  let words = Gc.minor_words () -. before in
  Alcotest.(check bool)
    (Printf.sprintf "fewer than 1 minor word per message kept (%.0f for 1000)" words)
    true (words < 1000.);
  let c = M.copy r 1063 in
  Alcotest.(check string) "kept as pushed" ("HDR" ^ String.make 100 'x') (Msg.to_string c);
  Msg.release c;
  M.reset r;
  Msg.release m;
  Alcotest.(check int) "every slice back" 0 (Pool.in_use pool)

let () =
  Alcotest.run "seqring"
    [
      ( "model",
        [
          Alcotest.test_case "as a hash table, 2000 random runs" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 17 |]) same_as_hashtbl);
        ] );
      ( "bounded",
        [
          Alcotest.test_case "a sliding window stays small" `Quick bounded;
          Alcotest.test_case "the span shrinks as the least go" `Quick span_shrinks;
        ] );
      ( "msgring",
        [
          Alcotest.test_case "as a hash table of bytes, 300 random runs" `Quick (fun () ->
              QCheck.Test.check_exn ~rand:(Random.State.make [| 23 |]) msgring_as_hashtbl);
          Alcotest.test_case "a message of one slice is kept off the heap" `Quick msgring_no_heap;
          Alcotest.test_case "replace_head allocates nothing" `Quick replace_head_allocates_nothing;
          Alcotest.test_case "the span shrinks as all below a number go" `Quick msgring_span_shrinks;
        ] );
    ]
