(* Segments, pools, iovecs and iovec lists. *)

open Consort
open Util

let stats = Pool.stats
let count v = Segment.count (Iovec.segment v)

(* Segments *)

let segment_counts () =
  let freed = ref 0 in
  let seg =
    Segment.create ~size:16
      ~on_free:(fun _ -> incr freed)
      ~on_leak:ignore
      ~on_handle_leak:(fun _ _ -> ())
  in
  Alcotest.(check int) "size" 16 (Segment.size seg);
  Alcotest.(check int) "starts at zero" 0 (Segment.count seg);
  Segment.incr seg;
  Segment.incr seg;
  Alcotest.(check int) "two refs" 2 (Segment.count seg);
  Segment.decr seg;
  Alcotest.(check int) "not freed at one" 0 !freed;
  Alcotest.(check int) "generation unchanged" 0 (Segment.generation seg);
  Segment.decr seg;
  Alcotest.(check int) "freed at zero" 1 !freed;
  Alcotest.(check int) "generation bumped" 1 (Segment.generation seg);
  raises_invalid "decr at zero" (fun () -> Segment.decr seg);
  let seg2 =
    Segment.create ~size:16 ~on_free:ignore ~on_leak:ignore ~on_handle_leak:(fun _ _ -> ())
  in
  Alcotest.(check bool) "ids differ" true (Segment.id seg <> Segment.id seg2)

(* Iovecs: reference counting *)

let alloc_sub_retain_release () =
  let pool = fresh_pool () in
  let v = Pool.alloc pool 100 in
  Alcotest.(check int) "length" 100 (Iovec.length v);
  Alcotest.(check int) "one ref" 1 (count v);
  let s = Iovec.sub v ~off:10 ~len:20 in
  Alcotest.(check int) "sub length" 20 (Iovec.length s);
  Alcotest.(check int) "sub takes a ref" 2 (count v);
  let r = Iovec.retain v in
  Alcotest.(check int) "retain takes a ref" 3 (count v);
  let sh = Iovec.shift v 90 in
  Alcotest.(check int) "shift length" 10 (Iovec.length sh);
  Alcotest.(check int) "shift takes a ref" 4 (count v);
  Iovec.release v;
  Alcotest.(check bool) "released" false (Iovec.is_live v);
  Alcotest.(check bool) "sub still live" true (Iovec.is_live s);
  Alcotest.(check int) "three refs" 3 (count s);
  List.iter Iovec.release [ s; r; sh ];
  Alcotest.(check int) "all released" 0 (Segment.count (Iovec.segment s));
  raises_invalid "sub out of range" (fun () ->
      let v = Pool.alloc pool 8 in
      Fun.protect ~finally:(fun () -> Iovec.release v) (fun () -> Iovec.sub v ~off:4 ~len:5));
  raises_invalid "negative offset" (fun () ->
      let v = Pool.alloc pool 8 in
      Fun.protect ~finally:(fun () -> Iovec.release v) (fun () -> Iovec.sub v ~off:(-1) ~len:2));
  no_leaks pool

let zero_copy_sub () =
  let pool = fresh_pool () in
  let v = Pool.of_string pool "hello world" in
  let s = Iovec.sub v ~off:6 ~len:5 in
  Alcotest.(check string) "sub bytes" "world" (Iovec.to_string s);
  Cstruct.set_char (Iovec.cstruct s) 0 'W';
  Alcotest.(check string) "write through sub seen by parent" "hello World" (Iovec.to_string v);
  Cstruct.set_char (Iovec.cstruct v) 10 'D';
  Alcotest.(check string) "write through parent seen by sub" "WorlD" (Iovec.to_string s);
  Alcotest.(check bool) "same segment" true (Iovec.segment s == Iovec.segment v);
  Iovec.release v;
  Alcotest.(check string) "sub outlives parent" "WorlD" (Iovec.to_string s);
  Iovec.release s;
  no_leaks pool

let use_after_release () =
  let pool = fresh_pool () in
  let v = Pool.of_string pool "abc" in
  let r = Iovec.retain v in
  Iovec.release v;
  raises_uar "cstruct" (fun () -> Iovec.cstruct v);
  raises_uar "to_string" (fun () -> Iovec.to_string v);
  raises_uar "sub" (fun () -> Iovec.sub v ~off:0 ~len:1);
  raises_uar "retain" (fun () -> Iovec.retain v);
  raises_uar "double release" (fun () -> Iovec.release v);
  Alcotest.(check int) "double release did not drop another ref" 1 (count r);
  Alcotest.(check string) "other owner intact" "abc" (Iovec.to_string r);
  Alcotest.(check string) "pp" "<iovec 3 bytes released>" (Fmt.str "%a" Iovec.pp v);
  Iovec.release r;
  no_leaks pool

(* Pools *)

let free_list_without_gc () =
  let pool = fresh_pool ~segment_size:64 () in
  let a = Pool.alloc pool 64 in
  let b = Pool.alloc pool 8 in
  Alcotest.(check bool) "second segment" true (Iovec.segment a != Iovec.segment b);
  let s = stats pool in
  Alcotest.(check int) "created" 2 s.segments_created;
  Alcotest.(check int) "in use" 2 s.segments_in_use;
  Alcotest.(check int) "none free" 0 s.segments_free;
  let a' = Iovec.sub a ~off:0 ~len:4 in
  Iovec.release a;
  Alcotest.(check int) "still held by a sub" 0 (stats pool).segments_free;
  (* Release must put the segment back at once, before any collection. *)
  let majors = (Gc.quick_stat ()).Gc.major_collections in
  Iovec.release a';
  let s = stats pool in
  Alcotest.(check int) "no collection ran" majors (Gc.quick_stat ()).Gc.major_collections;
  Alcotest.(check int) "back on free list" 1 s.segments_free;
  Alcotest.(check int) "one in use" 1 s.segments_in_use;
  (* The current segment has no room for 64 bytes: the next comes from the free list. *)
  let c = Pool.alloc pool 64 in
  Alcotest.(check bool) "reused freed segment" true (Iovec.segment c == Iovec.segment a);
  let s = stats pool in
  Alcotest.(check int) "nothing new created" 2 s.segments_created;
  Alcotest.(check int) "free list used" 0 s.segments_free;
  Alcotest.(check int) "allocs" 3 s.allocs;
  List.iter Iovec.release [ b; c ];
  no_leaks pool

let current_segment_reused () =
  let pool = fresh_pool ~segment_size:128 () in
  let a = Pool.alloc pool 40 in
  let seg = Iovec.segment a in
  let b = Pool.alloc pool 40 in
  Alcotest.(check bool) "bump allocation in one segment" true (Iovec.segment b == seg);
  Alcotest.(check bool)
    "8-byte aligned, not overlapping" true
    ((Iovec.cstruct b).Cstruct.off >= 40 && (Iovec.cstruct b).Cstruct.off mod 8 = 0);
  Iovec.release a;
  Iovec.release b;
  (* Everything released: the whole segment is available again. *)
  let c = Pool.alloc pool 128 in
  Alcotest.(check bool) "same segment" true (Iovec.segment c == seg);
  Alcotest.(check int) "from its start" 0 (Iovec.cstruct c).Cstruct.off;
  Alcotest.(check int) "one segment ever" 1 (stats pool).segments_created;
  Iovec.release c;
  no_leaks pool

let max_free () =
  let pool = fresh_pool ~segment_size:64 ~max_free:1 () in
  let vs = List.init 4 (fun _ -> Pool.alloc pool 64) in
  let last = Pool.alloc pool 8 in
  List.iter Iovec.release vs;
  let s = stats pool in
  Alcotest.(check int) "free list bounded" 1 s.segments_free;
  Alcotest.(check int) "only current in use" 1 s.segments_in_use;
  Iovec.release last;
  no_leaks pool

let oversize () =
  let pool = fresh_pool ~segment_size:64 () in
  let small = Pool.alloc pool 8 in
  let big = Pool.alloc pool 1000 in
  Alcotest.(check int) "length" 1000 (Iovec.length big);
  Alcotest.(check int) "own segment" 1000 (Segment.size (Iovec.segment big));
  let s = stats pool in
  Alcotest.(check int) "oversize in use" 1 s.oversize_in_use;
  Alcotest.(check int) "created counts it" 2 s.segments_created;
  let small2 = Pool.alloc pool 8 in
  Alcotest.(check bool)
    "current segment untouched" true
    (Iovec.segment small2 == Iovec.segment small);
  Cstruct.memset (Iovec.cstruct big) 0x41;
  let tail = Iovec.sub big ~off:990 ~len:10 in
  Iovec.release big;
  Alcotest.(check int) "tail keeps it" 1 (stats pool).oversize_in_use;
  Alcotest.(check string) "tail bytes" (String.make 10 'A') (Iovec.to_string tail);
  Iovec.release tail;
  let s = stats pool in
  Alcotest.(check int) "oversize released" 0 s.oversize_in_use;
  Alcotest.(check int) "not put on free list" 0 s.segments_free;
  List.iter Iovec.release [ small; small2 ];
  raises_invalid "negative size" (fun () -> Pool.alloc pool (-1));
  no_leaks pool

let stats_and_copy () =
  let pool = fresh_pool ~segment_size:256 () in
  let s0 = stats pool in
  Alcotest.(check int) "segment size" 256 s0.segment_size;
  Alcotest.(check int) "nothing yet" 0 s0.segments_created;
  Alcotest.(check int) "no bytes" 0 s0.bytes_in_use;
  let v = Pool.copy pool (Cstruct.of_string "copied") in
  let w = Pool.of_string pool "" in
  Alcotest.(check string) "copy" "copied" (Iovec.to_string v);
  Alcotest.(check int) "empty" 0 (Iovec.length w);
  let s = stats pool in
  Alcotest.(check int) "allocs" 2 s.allocs;
  Alcotest.(check int) "bytes in use" 256 s.bytes_in_use;
  let printed = Fmt.str "%a" Pool.pp_stats s in
  check_contains "pp_stats" ~sub:"2 allocs" printed;
  Iovec.release v;
  Iovec.release w;
  no_leaks pool;
  let s = stats pool in
  Alcotest.(check int) "retired and freed" 0 s.segments_in_use;
  Alcotest.(check int) "on free list" 1 s.segments_free

(* Leaks *)

let[@inline never] drop_alloc pool n = ignore (Sys.opaque_identity (Pool.alloc pool n))
let[@inline never] drop_sub v = ignore (Sys.opaque_identity (Iovec.sub v ~off:0 ~len:1))

let leak_checked () =
  let pool = fresh_pool ~segment_size:64 () in
  drop_alloc pool 16;
  Alcotest.(check int) "one leak" 1 (Pool.leak_check pool);
  Alcotest.(check int) "where recorded" 1 (List.length (Pool.leaks_where pool));
  Alcotest.(check bool)
    "where names the allocation" true
    (List.exists
       (fun w ->
         let sub = "test_buffers.ml" in
         let n = String.length sub in
         let rec at i = i + n <= String.length w && (String.sub w i n = sub || at (i + 1)) in
         at 0)
       (Pool.leaks_where pool));
  let s = stats pool in
  Alcotest.(check int) "stats count it" 1 s.leaks;
  (* The leaked reference was given back: the segment is free again. *)
  Alcotest.(check int) "memory recovered" 0 s.segments_in_use;
  Alcotest.(check int) "segment on free list" 1 s.segments_free;
  Alcotest.(check int) "no new leak" 1 (Pool.leak_check pool)

let leak_checked_slice_in_live_segment () =
  let pool = fresh_pool () in
  let v = Pool.of_string pool "keep me" in
  drop_sub v;
  Alcotest.(check int) "slice leak found while segment alive" 1 (Pool.leak_check pool);
  Alcotest.(check int) "count restored" 1 (count v);
  Alcotest.(check string) "live iovec intact" "keep me" (Iovec.to_string v);
  Iovec.release v;
  Alcotest.(check int) "freed" 0 (stats pool).segments_in_use;
  Alcotest.(check int) "still one leak" 1 (Pool.leak_check pool)

let leak_unchecked () =
  Iovec.set_checked false;
  Fun.protect ~finally:(fun () -> Iovec.set_checked true) @@ fun () ->
  let pool = Pool.create ~segment_size:64 ~name:"unchecked" () in
  drop_alloc pool 16;
  Alcotest.(check int) "whole segment leak" 1 (Pool.leak_check pool);
  Alcotest.(check int) "no places in unchecked mode" 0 (List.length (Pool.leaks_where pool));
  (* A released slice is not a leak. *)
  let pool = Pool.create ~segment_size:64 ~name:"unchecked2" () in
  Iovec.release (Pool.alloc pool 16);
  Alcotest.(check int) "no leak" 0 (Pool.leak_check pool)

let poison () =
  let pool = fresh_pool ~segment_size:64 () in
  let a = Pool.of_string pool (String.make 64 'x') in
  let raw = Iovec.cstruct a in
  let b = Pool.alloc pool 8 in
  Iovec.release a;
  Alcotest.(check string) "freed segment poisoned" (String.make 64 '\xde') (Cstruct.to_string raw);
  Iovec.release b;
  let big = Pool.of_string pool (String.make 100 'y') in
  let raw = Iovec.cstruct big in
  Iovec.release big;
  Alcotest.(check string)
    "freed oversize segment poisoned" (String.make 100 '\xde') (Cstruct.to_string raw);
  no_leaks pool

(* Iovecs *)

let pieces pool l = List.map (Pool.of_string pool) l

let iovecs_basics () =
  let pool = fresh_pool () in
  let t = pieces pool [ "hello"; " "; "world" ] in
  Alcotest.(check int) "length" 11 (Iovecs.length t);
  Alcotest.(check string) "to_string" "hello world" (Iovecs.to_string t);
  Alcotest.(check bool) "equal_string" true (Iovecs.equal_string t "hello world");
  Alcotest.(check bool) "not equal" false (Iovecs.equal_string t "hello");
  let s = Iovecs.sub t ~off:3 ~len:5 in
  Alcotest.(check string) "sub across pieces" "lo wo" (Iovecs.to_string s);
  Alcotest.(check int) "three pieces" 3 (List.length s);
  Alcotest.(check bool)
    "no copy" true
    (List.for_all2 (fun a b -> Iovec.segment a == Iovec.segment b) s t);
  Alcotest.(check int) "empty sub" 0 (List.length (Iovecs.sub t ~off:11 ~len:0));
  let inner = Iovecs.sub t ~off:7 ~len:3 in
  Alcotest.(check string) "sub inside one piece" "orl" (Iovecs.to_string inner);
  Alcotest.(check int) "one piece" 1 (List.length inner);
  raises_invalid "sub beyond" (fun () -> Iovecs.sub t ~off:5 ~len:7);
  let flat = Iovecs.flatten pool t in
  Alcotest.(check string) "flatten copies several pieces" "hello world" (Iovec.to_string flat);
  Cstruct.set_char (Iovec.cstruct flat) 0 'j';
  Alcotest.(check string) "copy is independent" "hello world" (Iovecs.to_string t);
  let one = pieces pool [ "single" ] in
  let f1 = Iovecs.flatten pool one in
  Cstruct.set_char (Iovec.cstruct f1) 0 'S';
  Alcotest.(check string) "single piece shared" "Single" (Iovecs.to_string one);
  let dst = Cstruct.create 13 in
  Iovecs.blit_to t dst 1;
  Alcotest.(check string) "blit_to" "\000hello world\000" (Cstruct.to_string dst);
  let r = Iovecs.retain t in
  let both = Iovecs.append r (Iovecs.of_string pool "!") in
  Alcotest.(check string) "append" "hello world!" (Iovecs.to_string both);
  Alcotest.(check int) "of_string empty" 0 (List.length (Iovecs.of_string pool ""));
  Alcotest.(check int) "empty" 0 (Iovecs.length Iovecs.empty);
  List.iter Iovecs.release [ t; s; inner; one; both ];
  List.iter Iovec.release [ flat; f1 ];
  raises_uar "released list" (fun () -> Iovecs.to_string t);
  no_leaks pool

let iovecs_sub_prop =
  let open QCheck in
  let arb =
    make
      ~print:Print.(triple (list string) int int)
      Gen.(
        list_size (int_range 0 6) (string_size (int_range 0 5)) >>= fun l ->
        let n = List.fold_left (fun n s -> n + String.length s) 0 l in
        int_range 0 n >>= fun off ->
        int_range 0 (n - off) >|= fun len -> (l, off, len))
  in
  qtest ~count:200 "iovecs sub = String.sub" arb (fun (l, off, len) ->
      let pool = fresh_pool () in
      let t = pieces pool l in
      let s = Iovecs.sub t ~off ~len in
      let ok = Iovecs.to_string s = String.sub (String.concat "" l) off len in
      let flat = Iovecs.flatten pool s in
      let ok = ok && Iovec.to_string flat = String.sub (String.concat "" l) off len in
      Iovec.release flat;
      Iovecs.release s;
      Iovecs.release t;
      ok && Pool.leak_check pool = 0)

let tests =
  [
    Alcotest.test_case "segment counts and free callback" `Quick segment_counts;
    Alcotest.test_case "alloc/sub/retain/shift/release counts" `Quick alloc_sub_retain_release;
    Alcotest.test_case "sub is zero-copy" `Quick zero_copy_sub;
    Alcotest.test_case "use after release, double release" `Quick use_after_release;
    Alcotest.test_case "segment back on free list without GC" `Quick free_list_without_gc;
    Alcotest.test_case "current segment reused from start" `Quick current_segment_reused;
    Alcotest.test_case "max_free bounds the free list" `Quick max_free;
    Alcotest.test_case "oversize allocations" `Quick oversize;
    Alcotest.test_case "stats, copy, pp_stats" `Quick stats_and_copy;
    Alcotest.test_case "checked leak found and recovered" `Quick leak_checked;
    Alcotest.test_case "checked leak of a slice in a live segment" `Quick
      leak_checked_slice_in_live_segment;
    Alcotest.test_case "unchecked whole-segment leak" `Quick leak_unchecked;
    Alcotest.test_case "freed segments poisoned" `Quick poison;
    Alcotest.test_case "iovecs sub/flatten/append/blit/release" `Quick iovecs_basics;
    iovecs_sub_prop;
  ]
