(* Sequence numbers, the segment codec, the checksum, and the pure parts of
   TCP: RTO estimator, send ring, reassembly queue, SACK scoreboard. *)

let qtest ?(count = 500) ~seed name gen prop =
  let t = QCheck.Test.make ~count ~name gen prop in
  Alcotest.test_case name `Quick (fun () ->
      QCheck.Test.check_exn ~rand:(Random.State.make [| seed |]) t)

let seq = Tcp_seq.of_int
let check_int = Alcotest.(check int)
let check_bool = Alcotest.(check bool)

(* {1 Sequence numbers} *)

let seq_wrap () =
  let top = seq 0xFFFF_FFF0 in
  let past = Tcp_seq.add top 0x20 in
  check_int "wraps" 0x10 (Tcp_seq.to_int past);
  check_bool "lt across the wrap" true (Tcp_seq.lt top past);
  check_bool "gt across the wrap" true (Tcp_seq.gt past top);
  check_int "distance across the wrap" 0x20 (Tcp_seq.sub past top);
  check_int "negative distance" (-0x20) (Tcp_seq.sub top past);
  check_bool "between" true (Tcp_seq.between (seq 2) ~low:top ~high:past);
  check_bool "not between" false (Tcp_seq.between top ~low:(seq 2) ~high:past);
  check_int "max" (Tcp_seq.to_int past) (Tcp_seq.to_int (Tcp_seq.max top past));
  check_int "of_int negative" 0xFFFF_FFFF (Tcp_seq.to_int (seq (-1)))

let seq_props =
  qtest ~seed:1 "add and sub are inverse; lt is antisymmetric"
    QCheck.(pair (int_bound 0xFFFF_FFFF) (int_range (-0x7FFF_FFFF) 0x7FFF_FFFF))
    (fun (a, d) ->
      let a = seq a in
      let b = Tcp_seq.add a d in
      Tcp_seq.sub b a = d
      && Tcp_seq.lt a b = (d > 0)
      && Tcp_seq.lt b a = (d < 0)
      && Tcp_seq.to_int b >= 0
      && Tcp_seq.to_int b <= 0xFFFF_FFFF)

(* {1 Codec} *)

let gen_option =
  let open QCheck.Gen in
  let u32 =
    map
      (fun x -> x land 0xFFFF_FFFF)
      (int_bound 0x3FFF_FFFF >>= fun a -> map (fun b -> (a lsl 2) lor b) (int_bound 3))
  in
  frequency
    [
      (2, map (fun n -> Tcp_packet.Mss n) (int_bound 0xFFFF));
      (2, map (fun n -> Tcp_packet.Window_scale n) (int_bound 255));
      (2, return Tcp_packet.Sack_permitted);
      ( 2,
        map
          (fun bs -> Tcp_packet.Sack (List.map (fun (a, b) -> (seq a, seq b)) bs))
          (list_size (int_range 1 3) (pair u32 u32)) );
      (2, map2 (fun value echo -> Tcp_packet.Timestamp { value; echo }) u32 u32);
      ( 1,
        map2
          (fun kind data -> Tcp_packet.Unknown { kind; data })
          (oneofl [ 6; 7; 9; 19; 28; 30; 34; 253; 254 ])
          (string_size ~gen:char (int_bound 6)) );
    ]

let gen_header =
  let open QCheck.Gen in
  let rec fit acc = function
    | [] -> List.rev acc
    | o :: rest ->
        let used = List.fold_left (fun n o -> n + Tcp_packet.option_length o) 0 acc in
        if used + Tcp_packet.option_length o <= 40 then fit (o :: acc) rest else fit acc rest
  in
  map
    (fun ((src_port, dst_port, s, a), (flags, window, urgent, options)) ->
      Tcp_packet.v ~src_port ~dst_port ~seq:(seq s) ~ack:(seq a)
        ~flags:(Tcp_packet.flags_of_int flags) ~window ~urgent ~options:(fit [] options) ())
    (pair
       (quad (int_bound 0xFFFF) (int_bound 0xFFFF) (int_bound 0x3FFF_FFFF) (int_bound 0x3FFF_FFFF))
       (quad (int_bound 255) (int_bound 0xFFFF) (int_bound 0xFFFF)
          (list_size (int_bound 5) gen_option)))

let arb_header = QCheck.make ~print:(Fmt.to_to_string Tcp_packet.pp) gen_header

let codec_roundtrip =
  qtest ~count:2000 ~seed:2 "encode then decode is the identity"
    QCheck.(pair arb_header (string_of_size (Gen.int_bound 100)))
    (fun (h, payload) ->
      let pseudo = 0x1234 in
      let cs = Tcp_packet.to_cstruct ~pseudo h ~payload in
      match Tcp_packet.decode cs with
      | Ok (h', hl) ->
          Tcp_packet.equal h h'
          && hl = Tcp_packet.header_length h
          && Cstruct.to_string (Cstruct.shift cs hl) = payload
          && Tcp_checksum.valid (Tcp_checksum.sum ~init:pseudo cs)
      | Error _ -> false)

let codec_random_bytes =
  qtest ~count:5000 ~seed:3 "decode never raises on random bytes"
    QCheck.(string_of_size (Gen.int_bound 80))
    (fun s ->
      match Tcp_packet.decode (Cstruct.of_string s) with
      | Ok (h, hl) -> hl >= 20 && hl <= String.length s && Tcp_packet.header_length h <= 60
      | Error _ -> true)

let codec_mutations =
  qtest ~count:5000 ~seed:4 "decode never raises on damaged segments"
    QCheck.(triple arb_header (int_bound 1000) (int_bound 255))
    (fun (h, pos, byte) ->
      let cs = Tcp_packet.to_cstruct h ~payload:"data" in
      let n = Cstruct.length cs in
      Cstruct.set_uint8 cs (pos mod n) byte;
      let cut = Cstruct.sub cs 0 (pos mod (n + 1)) in
      (match Tcp_packet.decode cs with Ok _ | Error _ -> ());
      match Tcp_packet.decode cut with Ok _ | Error _ -> true)

let codec_errors () =
  let bad s =
    match Tcp_packet.decode (Cstruct.of_string s) with Ok _ -> false | Error _ -> true
  in
  check_bool "short" true (bad (String.make 19 '\000'));
  let h = String.make 20 '\000' in
  let with_offset b = String.mapi (fun i c -> if i = 12 then Char.chr b else c) h in
  check_bool "offset below 5 words" true (bad (with_offset 0x40));
  check_bool "offset beyond the segment" true (bad (with_offset 0x60));
  let opt bytes =
    let hdr = with_offset 0x60 in
    hdr ^ bytes
  in
  check_bool "option without length" true (bad (opt "\001\001\001\002"));
  check_bool "option length 1" true (bad (opt "\002\001\000\000"));
  check_bool "option past the header" true (bad (opt "\002\008\000\000"));
  (match Tcp_packet.decode (Cstruct.of_string (opt "\002\003\005\000")) with
  | Ok (h, _) ->
      check_bool "MSS with the wrong length is unknown" true
        (match h.options with [ Tcp_packet.Unknown { kind = 2; _ } ] -> true | _ -> false)
  | Error _ -> Alcotest.fail "should decode");
  match Tcp_packet.decode (Cstruct.of_string (opt "\001\000\002\004")) with
  | Ok (h, _) -> check_int "options stop at EOL" 0 (List.length h.options)
  | Error _ -> Alcotest.fail "should decode"

(* {1 Checksum} *)

let checksum_vectors () =
  (* RFC 1071 section 3. *)
  let cs = Cstruct.of_string "\x00\x01\xf2\x03\xf4\xf5\xf6\xf7" in
  check_int "RFC 1071 sum" 0xddf2 (Tcp_checksum.fold (Tcp_checksum.sum cs));
  check_int "odd length pads with zero" 0x0100
    (Tcp_checksum.fold (Tcp_checksum.sum (Cstruct.of_string "\x01")));
  check_int "finish" 0x220d (Tcp_checksum.finish (Tcp_checksum.sum cs))

let checksum_model =
  qtest ~seed:5 "the sum agrees with a word-by-word model"
    QCheck.(string_of_size (Gen.int_bound 300))
    (fun s ->
      let model = ref 0 in
      String.iteri
        (fun i c -> model := !model + if i land 1 = 0 then Char.code c lsl 8 else Char.code c)
        s;
      let fold x =
        let rec go x = if x > 0xFFFF then go ((x land 0xFFFF) + (x lsr 16)) else x in
        go x
      in
      let cs = Cstruct.of_string s in
      Tcp_checksum.fold (Tcp_checksum.sum cs) = fold !model
      && Tcp_checksum.fold (Tcp_checksum.reference_sum cs) = fold !model
      && Tcp_checksum.fold (Tcp_checksum.sum ~init:0x12345 cs)
         = Tcp_checksum.fold (Tcp_checksum.reference_sum ~init:0x12345 cs))

(* {1 RTO} *)

let ms = Consort.Time.of_ms

let rto_rfc6298 () =
  let r = Tcp_rto.create ~initial:(ms 1000) ~min:(ms 200) ~max:(ms 60_000) in
  check_int "initial" (ms 1000) (Tcp_rto.rto r);
  Tcp_rto.backoff r;
  check_int "backed off before a sample" (ms 2000) (Tcp_rto.rto r);
  Tcp_rto.sample r (ms 100);
  check_int "first sample: srtt + 4 * srtt/2" (ms 300) (Tcp_rto.rto r);
  Tcp_rto.sample r (ms 100);
  check_int "second sample: rttvar 3/4" (ms 250) (Tcp_rto.rto r);
  for _ = 1 to 50 do
    Tcp_rto.sample r (ms 10)
  done;
  check_int "floor" (ms 200) (Tcp_rto.rto r);
  for _ = 1 to 20 do
    Tcp_rto.backoff r
  done;
  check_int "ceiling" (ms 60_000) (Tcp_rto.rto r);
  Tcp_rto.sample r (ms 10);
  check_int "a sample clears the backoff" 0 (Tcp_rto.backoffs r)

(* {1 Send ring} *)

let sndbuf_model =
  qtest ~seed:6 "the send ring behaves as a byte queue"
    QCheck.(list (pair bool (int_bound 50)))
    (fun ops ->
      let r = Tcp_sndbuf.create 64 in
      let model = Buffer.create 64 in
      let next = ref 0 in
      List.for_all
        (fun (w, n) ->
          if w then begin
            let src =
              Cstruct.of_string (String.init n (fun i -> Char.chr ((!next + i) land 0xFF)))
            in
            let k = Tcp_sndbuf.write r src ~off:0 ~len:n in
            Buffer.add_string model (Cstruct.to_string (Cstruct.sub src 0 k));
            next := !next + k;
            k = min n (64 - (Buffer.length model - k))
          end
          else
            begin
              let n = min n (Buffer.length model) in
              let dst = Cstruct.create (Buffer.length model) in
              Tcp_sndbuf.blit_out r ~src_off:0 dst ~dst_off:0 ~len:(Buffer.length model);
              let same = Cstruct.to_string dst = Buffer.contents model in
              Tcp_sndbuf.drop r n;
              let rest = Buffer.sub model n (Buffer.length model - n) in
              Buffer.clear model;
              Buffer.add_string model rest;
              same
            end
            && Tcp_sndbuf.length r = Buffer.length model)
        ops)

(* {1 Reassembly} *)

let reass_model =
  qtest ~count:300 ~seed:7 "the out-of-order queue rebuilds the stream from overlapping pieces"
    QCheck.(
      pair (int_bound 0xFFFF_FFFF)
        (list_of_size (Gen.int_range 1 40) (pair (int_bound 2000) (int_range 1 300))))
    (fun (base, pieces) ->
      let pool = Consort.Pool.create () in
      let stream = String.init 2300 (fun i -> Char.chr (i * 7 land 0xFF)) in
      let q = Tcp_reass.create ~max_segments:1000 in
      let base = seq base in
      let held = Array.make 2300 false in
      List.iter
        (fun (off, len) ->
          let off = off + 1 in
          let p = Packet.of_string pool (String.sub stream off len) in
          ignore (Tcp_reass.insert q (Tcp_seq.add base off) p);
          Array.fill held off len true)
        pieces;
      (* The blocks are exactly the bytes held. *)
      let blocks_ok =
        List.for_all
          (fun (l, r) ->
            let l = Tcp_seq.sub l base and r = Tcp_seq.sub r base in
            let ok = ref (l > 0 && not held.(l - 1)) in
            for i = l to r - 1 do
              if not held.(i) then ok := false
            done;
            !ok && (r >= 2300 || not held.(r)))
          (Tcp_reass.blocks q)
      in
      let total = Array.fold_left (fun n b -> if b then n + 1 else n) 0 held in
      let bytes_ok = Tcp_reass.bytes q = total in
      (* Deliver the missing first byte: everything contiguous comes out. *)
      let out = Buffer.create 2300 in
      let next = ref (Tcp_seq.succ base) in
      Buffer.add_char out stream.[0];
      let rec drain () =
        match Tcp_reass.pop q !next with
        | Some p ->
            Buffer.add_string out (Packet.to_string p);
            next := Tcp_seq.add !next (Packet.length p);
            Packet.release p;
            drain ()
        | None -> ()
      in
      drain ();
      let n = Buffer.length out in
      let prefix_ok = Buffer.contents out = String.sub stream 0 n in
      let contiguous = ref 1 in
      while !contiguous < 2300 && held.(!contiguous) do
        incr contiguous
      done;
      Tcp_reass.clear q;
      blocks_ok && bytes_ok && prefix_ok && n = !contiguous && Consort.Pool.in_use pool = 0)

let reass_bound () =
  let pool = Consort.Pool.create () in
  let q = Tcp_reass.create ~max_segments:2 in
  let ins s = Tcp_reass.insert q (seq s) (Packet.of_string pool "abcd") in
  Alcotest.(check bool) "first" true (ins 10 = `Stored);
  Alcotest.(check bool) "second" true (ins 20 = `Stored);
  Alcotest.(check bool) "over the bound" true (ins 30 = `Full);
  Alcotest.(check bool) "duplicate" true (ins 10 = `Duplicate);
  Alcotest.(check (list (pair int int)))
    "sack blocks, newest first"
    [ (20, 24); (10, 14) ]
    (List.map (fun (l, r) -> (Tcp_seq.to_int l, Tcp_seq.to_int r)) (Tcp_reass.sack_blocks q ~max:4));
  Tcp_reass.clear q;
  check_int "released" 0 (Consort.Pool.in_use pool)

(* The queue as it was written first, over integers: sorted lists scanned and
   copied on every segment. The queue must answer exactly as it does. *)
module Reass_model = struct
  type t = {
    max : int;
    mutable q : (int * int) list;
    mutable count : int;
    mutable bytes : int;
    mutable recent : int list;
  }

  let create max = { max; q = []; count = 0; bytes = 0; recent = [] }
  let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r
  let remember t s = t.recent <- take 8 (s :: List.filter (( <> ) s) t.recent)

  let insert t seq len =
    let e = seq + len in
    if len <= 0 || List.exists (fun (s, l) -> s <= seq && s + l >= e) t.q then `Duplicate
    else begin
      t.q <-
        List.filter
          (fun (s, l) ->
            if s >= seq && s + l <= e then begin
              t.count <- t.count - 1;
              t.bytes <- t.bytes - l;
              false
            end
            else true)
          t.q;
      let seq, len =
        match List.find_opt (fun (s, l) -> s < seq && s + l > seq) t.q with
        | Some (s, l) -> (s + l, len - (s + l - seq))
        | None -> (seq, len)
      in
      let len =
        match List.find_opt (fun (s, _) -> s >= seq && s < e) t.q with
        | Some (s, _) -> s - seq
        | None -> len
      in
      if len <= 0 then `Duplicate
      else if t.count >= t.max then `Full
      else begin
        t.q <- List.sort compare ((seq, len) :: t.q);
        t.count <- t.count + 1;
        t.bytes <- t.bytes + len;
        remember t seq;
        `Stored
      end
    end

  (* Pops until [next] is not held; the bytes delivered. *)
  let drain t next =
    let rec go next =
      match t.q with
      | (s, l) :: rest when s <= next ->
          t.q <- rest;
          t.count <- t.count - 1;
          t.bytes <- t.bytes - l;
          go (max next (s + l))
      | _ -> next
    in
    go next

  let blocks t =
    List.rev
      (List.fold_left
         (fun acc (s, l) ->
           match acc with (a, b) :: r when b = s -> (a, s + l) :: r | _ -> (s, s + l) :: acc)
         [] t.q)

  let sack_blocks t ~max =
    let bs = blocks t in
    let chosen = ref [] in
    let add b = if not (List.mem b !chosen) then chosen := b :: !chosen in
    List.iter
      (fun s ->
        match List.find_opt (fun (l, r) -> l <= s && s < r) bs with Some b -> add b | None -> ())
      t.recent;
    List.iter add (List.rev bs);
    take max (List.rev !chosen)
end

let reass_reference =
  qtest ~count:300 ~seed:11 "the out-of-order queue answers as the list model, across wrap-around"
    QCheck.(
      pair (int_bound 0xFFFF_FFFF)
        (list_of_size (Gen.int_range 1 120) (triple (int_bound 9) (int_bound 400) (int_range 1 40))))
    (fun (base, ops) ->
      let pool = Consort.Pool.create () in
      let q = Tcp_reass.create ~max_segments:24 in
      let m = Reass_model.create 24 in
      let base = seq base in
      let next = ref 1 in
      let rel l = List.map (fun (a, b) -> (Tcp_seq.sub a base, Tcp_seq.sub b base)) l in
      let ok =
        List.for_all
          (fun (kind, off, len) ->
            let same_result =
              if kind = 0 then begin
                (* The hole at [next] is filled: everything contiguous comes out. *)
                let upto = Reass_model.drain m (!next + 1) in
                let got = ref (!next + 1) in
                let rec drain () =
                  match Tcp_reass.pop q (Tcp_seq.add base !got) with
                  | Some p ->
                      got := !got + Packet.length p;
                      Packet.release p;
                      drain ()
                  | None -> ()
                in
                drain ();
                next := upto;
                !got = upto
              end
              else begin
                let off = !next + 1 + off in
                let r =
                  Tcp_reass.insert q (Tcp_seq.add base off)
                    (Packet.of_string pool (String.make len 'x'))
                in
                r = Reass_model.insert m off len
              end
            in
            same_result
            && rel (Tcp_reass.blocks q) = Reass_model.blocks m
            && Tcp_reass.block_count q = List.length (Reass_model.blocks m)
            && rel (Tcp_reass.sack_blocks q ~max:4) = Reass_model.sack_blocks m ~max:4
            && rel (Tcp_reass.sack_blocks q ~max:2) = Reass_model.sack_blocks m ~max:2
            && Tcp_reass.segments q = m.count
            && Tcp_reass.bytes q = m.bytes)
          ops
      in
      Tcp_reass.clear q;
      ok && Consort.Pool.in_use pool = 0)

(* A hostile peer: a thousand one-byte holes, filled in the worst orders, with
   segments that bridge many of them, duplicates, and more than the bound. The
   queue's work stays a constant per segment (plus one per segment released),
   counted, not timed. *)
let reass_hostile () =
  let pool = Consort.Pool.create () in
  let n = 1024 in
  let q = Tcp_reass.create ~max_segments:n in
  let base = seq 0xFFFF_F000 in
  let ops = ref 0 and released = ref 0 in
  let held = Array.make ((4 * n) + 200) false in
  let ins off len =
    incr ops;
    let before = Tcp_reass.segments q in
    let r =
      Tcp_reass.insert q (Tcp_seq.add base off) (Packet.of_string pool (String.make len 'h'))
    in
    ignore (Tcp_reass.sack_blocks q ~max:4);
    released := !released + max 0 (before + (if r = `Stored then 1 else 0) - Tcp_reass.segments q);
    if r = `Stored then Array.fill held off len true;
    r
  in
  (* One-byte segments at every other byte, from the highest down: each lands in front of all the
     others. *)
  for i = n downto 1 do
    ignore (ins (2 * i) 1)
  done;
  check_int "a thousand holes" n (Tcp_reass.block_count q);
  (* Over the bound, and duplicates of each. *)
  let full = ref 0 and dup = ref 0 in
  for i = 1 to n do
    if ins ((2 * n) + (2 * i)) 1 = `Full then incr full;
    if ins (2 * i) 1 = `Duplicate then incr dup
  done;
  check_int "over the bound: full" n !full;
  check_int "duplicates" n !dup;
  (* Scattered over the middle: segments that cover two held bytes and the hole between. *)
  let rng = Random.State.make [| 34 |] in
  for _ = 1 to n do
    let i = 1 + Random.State.int rng (n - 1) in
    ignore (ins (2 * i) 3)
  done;
  (* Large segments over many small ones. *)
  let i = ref 1 in
  while !i < 2 * n do
    ignore (ins !i 97);
    i := !i + 90
  done;
  let w = Tcp_reass.work q in
  let bound = (24 * !ops) + !released in
  if w > bound then
    Alcotest.failf "work %d over %d ops (%d released): over %d" w !ops !released bound;
  (* The stream still comes out whole: fill the first byte. *)
  let got = ref 1 in
  let rec drain () =
    match Tcp_reass.pop q (Tcp_seq.add base !got) with
    | Some p ->
        got := !got + Packet.length p;
        Packet.release p;
        drain ()
    | None -> ()
  in
  drain ();
  let expect = ref 1 in
  while held.(!expect) do
    incr expect
  done;
  check_bool "the large segments bridged every hole" true (!expect > 2 * n);
  check_int "everything held comes out" !expect !got;
  check_bool "empty" true (Tcp_reass.is_empty q);
  check_int "no blocks" 0 (Tcp_reass.block_count q);
  Tcp_reass.clear q;
  check_int "released" 0 (Consort.Pool.in_use pool)

(* {1 SACK scoreboard} *)

let sack_scoreboard () =
  let sb = Tcp_sack.create () in
  let una = seq 1000 and high = seq 11000 in
  let smss = 1000 in
  let blk l r = (seq l, seq r) in
  check_int "new bytes" 1000 (Tcp_sack.update sb ~una ~high [ blk 2000 3000 ]);
  check_int "merged, ignoring beyond high" 1000
    (Tcp_sack.update sb ~una ~high [ blk 3000 4000; blk 11000 12000 ]);
  check_bool "nothing lost yet" false (Tcp_sack.is_lost sb ~smss (seq 1000));
  ignore (Tcp_sack.update sb ~una ~high [ blk 5000 6000 ]);
  check_bool "lost: more than 2 segments above" true (Tcp_sack.is_lost sb ~smss (seq 1000));
  check_bool "not lost: only 1 segment above" false (Tcp_sack.is_lost sb ~smss (seq 4000));
  (* Holes: 1000-2000 (lost), 4000-5000, 6000-11000. *)
  check_int "pipe" (1000 + 5000) (Tcp_sack.pipe sb ~una ~high_rxt:una ~high_data:high ~smss);
  check_int "pipe counts retransmissions"
    (1000 + 5000 + 1000)
    (Tcp_sack.pipe sb ~una ~high_rxt:(seq 2000) ~high_data:high ~smss);
  (match Tcp_sack.next_seg sb ~una ~high_rxt:una ~smss with
  | `Lost (s, l) ->
      check_int "first lost" 1000 (Tcp_seq.to_int s);
      check_int "len" 1000 l
  | _ -> Alcotest.fail "expected a lost segment");
  (match Tcp_sack.next_seg sb ~una ~high_rxt:(seq 2000) ~smss with
  | `Unsacked (s, _) -> check_int "rule 3" 4000 (Tcp_seq.to_int s)
  | _ -> Alcotest.fail "expected rule 3");
  Tcp_sack.advance sb (seq 3500);
  check_int "advanced" 1500 (Tcp_sack.sacked_bytes sb);
  check_int "unsacked" 1000 (Tcp_sack.unsacked_between sb (seq 3500) (seq 5500))

(* The parts of reported blocks the scoreboard does not cover yet. *)
let sack_newly () =
  let seq = Tcp_seq.of_int in
  let sb = Tcp_sack.create () in
  let una = seq 0 and high = seq 100_000 in
  ignore (Tcp_sack.update sb ~una ~high [ (seq 2000, seq 3000); (seq 5000, seq 6000) ] : int);
  let show l = List.map (fun (a, b) -> (Tcp_seq.to_int a, Tcp_seq.to_int b)) l in
  Alcotest.(check (list (pair int int)))
    "around and between the blocks"
    [ (1000, 2000); (3000, 5000); (6000, 7000) ]
    (show (Tcp_sack.newly sb ~una ~high [ (seq 1000, seq 7000) ]));
  Alcotest.(check (list (pair int int)))
    "nothing new" []
    (show (Tcp_sack.newly sb ~una ~high [ (seq 2000, seq 3000); (seq 5500, seq 6000) ]));
  Alcotest.(check (list (pair int int)))
    "clipped to una, ascending"
    [ (500, 1000); (8000, 9000) ]
    (show (Tcp_sack.newly sb ~una:(seq 500) ~high [ (seq 8000, seq 9000); (seq 0, seq 1000) ]))

(* RACK's reordering window (RFC 8985 section 6.2 step 4): a quarter of
   the minimum RTT (40: 10), grown by a quarter for a D-SACK, once a round
   trip however many D-SACKs come in it, and back to a quarter after 16
   recoveries without one. *)
let rack_reo_wnd () =
  let seq = Tcp_seq.of_int in
  let r = Tcp_rack.create () in
  Tcp_rack.sent r ~seq:(seq 0) ~end_:(seq 1000) ~now:0;
  Tcp_rack.sent r ~seq:(seq 1000) ~end_:(seq 2000) ~now:0;
  Tcp_rack.ack r ~una:(seq 0) ~newly:[ (seq 1000, seq 2000) ] ~sacked:(fun _ _ -> true) ~now:40;
  let wnd () = Tcp_rack.reo_wnd r ~in_recovery:false ~dupacks:0 ~srtt:1000 in
  Alcotest.(check int) "a quarter of the minimum RTT" 10 (wnd ());
  Tcp_rack.dsack r ~una:(seq 0) ~nxt:(seq 2000);
  Alcotest.(check int) "a D-SACK: two quarters" 20 (wnd ());
  Tcp_rack.dsack r ~una:(seq 1000) ~nxt:(seq 3000);
  Tcp_rack.dsack r ~una:(seq 1500) ~nxt:(seq 4000);
  Alcotest.(check int) "more in the same round trip: the same" 20 (wnd ());
  Tcp_rack.dsack r ~una:(seq 2000) ~nxt:(seq 5000);
  Alcotest.(check int) "one in the next round trip: three quarters" 30 (wnd ());
  for _ = 1 to 15 do
    Tcp_rack.recovered r
  done;
  Alcotest.(check int) "15 recoveries without a D-SACK: kept" 30 (wnd ());
  Tcp_rack.recovered r;
  Alcotest.(check int) "the 16th: a quarter again" 10 (wnd ());
  Alcotest.(check int)
    "never above the smoothed RTT" 5
    (Tcp_rack.reo_wnd r ~in_recovery:false ~dupacks:0 ~srtt:5)

(* RACK's records against a simple model: bytes in flight as records are
   sent, SACKed, marked lost and sent again; and the work an ACK costs. *)
let rack_records () =
  let seq = Tcp_seq.of_int in
  let r = Tcp_rack.create () in
  let mss = 1000 and n = 2000 in
  for i = 0 to n - 1 do
    Tcp_rack.sent r ~seq:(seq (i * mss)) ~end_:(seq ((i + 1) * mss)) ~now:0
  done;
  Alcotest.(check int) "all in flight" (n * mss) (Tcp_rack.pipe r);
  let blocks = ref [] in
  let sacked a b = List.exists (fun (l, h) -> Tcp_seq.leq l a && Tcp_seq.leq b h) !blocks in
  (* The first segment lost; the others SACKed one ACK at a time. *)
  let before = Tcp_rack.work () in
  for i = 1 to n - 1 do
    blocks := [ (seq mss, seq ((i + 1) * mss)) ];
    Tcp_rack.ack r ~una:(seq 0) ~newly:[ (seq (i * mss), seq ((i + 1) * mss)) ] ~sacked ~now:20;
    ignore (Tcp_rack.detect r ~now:20 ~reo_wnd:5 : int * Consort.Time.t option)
  done;
  let per_ack = (Tcp_rack.work () - before) / (n - 1) in
  Alcotest.(check bool) (Fmt.str "a few records per ACK (%d)" per_ack) true (per_ack <= 4);
  Alcotest.(check int) "the first waits out the reordering window" mss (Tcp_rack.pipe r);
  (match Tcp_rack.detect r ~now:26 ~reo_wnd:5 with
  | 1, None -> ()
  | k, _ -> Alcotest.failf "%d marked lost after the window" k);
  Alcotest.(check int) "the first is lost" 0 (Tcp_rack.pipe r);
  (match Tcp_rack.next_lost r with
  | Some (s, len) -> Alcotest.(check (pair int int)) "which" (0, mss) (Tcp_seq.to_int s, len)
  | None -> Alcotest.fail "nothing lost");
  Tcp_rack.sent r ~seq:(seq 0) ~end_:(seq (mss / 2)) ~now:30;
  Alcotest.(check int) "half of it sent again (split)" (mss / 2) (Tcp_rack.pipe r);
  (match Tcp_rack.next_lost r with
  | Some (s, len) ->
      Alcotest.(check (pair int int)) "the other half" (mss / 2, mss / 2) (Tcp_seq.to_int s, len)
  | None -> Alcotest.fail "the other half is still lost");
  (* A peer that reports the whole range as new on every ACK. *)
  let before = Tcp_rack.work () in
  for _ = 1 to 100 do
    Tcp_rack.ack r ~una:(seq 0) ~newly:[ (seq 0, seq (n * mss)) ] ~sacked ~now:40;
    ignore (Tcp_rack.detect r ~now:40 ~reo_wnd:5 : int * Consort.Time.t option)
  done;
  let per_ack = (Tcp_rack.work () - before) / 100 in
  Alcotest.(check bool)
    (Fmt.str "bounded per ACK whatever is reported (%d)" per_ack)
    true
    (per_ack <= 1024 + 8);
  Tcp_rack.ack r ~una:(seq (n * mss)) ~newly:[] ~sacked ~now:50;
  Alcotest.(check int) "all acknowledged: nothing in flight" 0 (Tcp_rack.pipe r);
  Alcotest.(check int) "no record left" 0 (Tcp_rack.segments r)

(* In a recovery, each ACK asks RACK for the next segment to send again:
   with nothing marked lost (every hole sent again, thousands of segments
   in flight), that question cost a walk of the whole flight per ACK. It
   is answered in constant work, and a walk from hole to hole finds each
   lost segment once. *)
let rack_next_lost_work () =
  let r = Tcp_rack.create () in
  let mss = 1000 and n = 4096 and gap = 64 in
  for i = 0 to n - 1 do
    Tcp_rack.sent r ~seq:(seq (i * mss)) ~end_:(seq ((i + 1) * mss)) ~now:0
  done;
  let w0 = Tcp_rack.work () in
  for _ = 1 to 1000 do
    check_bool "nothing lost yet" true (Tcp_rack.next_lost r = None)
  done;
  let w = Tcp_rack.work () - w0 in
  check_bool (Fmt.str "nothing lost: constant work (%d for 1000)" w) true (w <= 1000);
  (* Every 64th segment lost, the others SACKed. *)
  let hole i = i mod gap = 0 in
  let sacked a b =
    let i = Tcp_seq.to_int a / mss in
    (not (hole i)) && Tcp_seq.to_int b <= (i + 1) * mss
  in
  for i = 0 to n - 1 do
    if not (hole i) then
      Tcp_rack.ack r ~una:(seq 0) ~newly:[ (seq (i * mss), seq ((i + 1) * mss)) ] ~sacked ~now:20
  done;
  (match Tcp_rack.detect r ~now:40 ~reo_wnd:5 with
  | k, _ -> check_int "the holes below the last SACK are lost" (n / gap) k);
  let w0 = Tcp_rack.work () in
  let found = ref 0 in
  let rec resend () =
    match Tcp_rack.next_lost r with
    | None -> ()
    | Some (s, len) ->
        check_int "each hole in order" (!found * gap * mss) (Tcp_seq.to_int s);
        incr found;
        Tcp_rack.sent r ~seq:s ~end_:(Tcp_seq.add s len) ~now:50;
        resend ()
  in
  resend ();
  check_int "every hole sent again" (n / gap) !found;
  for _ = 1 to 1000 do
    check_bool "all sent again" true (Tcp_rack.next_lost r = None)
  done;
  let w = Tcp_rack.work () - w0 in
  check_bool
    (Fmt.str "a walk from hole to hole, then constant work (%d)" w)
    true
    (w <= (4 * n / gap) + 1000 + 64)

(* RACK's next lost segment against a model: after every step of a random
   run (new segments, segments sent again whole or in part, SACKs,
   cumulative ACKs, detection, a timeout marking everything lost, a
   spurious timeout undone), it is the lowest segment [is_lost] says is
   lost, across sequence-number wrap. *)
let rack_next_lost_model =
  qtest ~count:300 ~seed:34 "RACK's next lost segment is the lowest one marked lost"
    QCheck.(
      pair (int_bound 0xFFFF_FFFF)
        (list_of_size (Gen.int_range 1 120)
           (triple (int_bound 9) (int_bound 5000) (int_bound 5000))))
    (fun (base, ops) ->
      let r = Tcp_rack.create () in
      let at o = Tcp_seq.add (seq base) o in
      let una = ref 0 and top = ref 0 and now = ref 0 in
      let edges = ref [ 0 ] and blocks = ref [] in
      let sacked a b =
        List.exists (fun (l, h) -> Tcp_seq.leq (at l) a && Tcp_seq.leq b (at h)) !blocks
      in
      let step (op, a, b) =
        incr now;
        match op with
        | 0 | 1 | 2 ->
            let len = 1 + (a mod 1500) in
            Tcp_rack.sent r ~seq:(at !top) ~end_:(at (!top + len)) ~now:!now;
            top := !top + len;
            edges := !top :: !edges
        | 3 -> (
            match Tcp_rack.next_lost r with
            | Some (s, len) -> Tcp_rack.sent r ~seq:s ~end_:(Tcp_seq.add s len) ~now:!now
            | None ->
                if !top > !una then begin
                  let x = !una + (a mod (!top - !una)) in
                  let y = min !top (x + 1 + b) in
                  Tcp_rack.sent r ~seq:(at x) ~end_:(at y) ~now:!now;
                  edges := x :: y :: !edges
                end)
        | 4 | 5 ->
            if !top > !una then begin
              let x = !una + (a mod (!top - !una)) in
              let y = min !top (x + 1 + b) in
              blocks := (x, y) :: !blocks;
              Tcp_rack.ack r ~una:(at !una) ~newly:[ (at x, at y) ] ~sacked ~now:!now
            end
        | 6 ->
            if !top > !una then begin
              una := !una + (a mod (!top - !una + 1));
              edges := !una :: !edges;
              Tcp_rack.ack r ~una:(at !una) ~newly:[] ~sacked ~now:!now
            end
        | 7 -> ignore (Tcp_rack.detect r ~now:!now ~reo_wnd:(b mod 5) : int * Consort.Time.t option)
        | 8 -> if a mod 4 = 0 then Tcp_rack.mark_all_lost r
        | _ -> if a mod 2 = 0 then Tcp_rack.unmark_lost r
      in
      List.for_all
        (fun op ->
          step op;
          let expected =
            List.sort_uniq compare !edges
            |> List.find_opt (fun o -> o >= !una && o < !top && Tcp_rack.is_lost r (at o))
          in
          let got = Option.map (fun (s, _) -> Tcp_seq.sub s (seq base)) (Tcp_rack.next_lost r) in
          if got <> expected then
            let o, a, b = op in
            QCheck.Test.fail_reportf "after (%d, %d, %d): next lost %a, the lowest lost %a" o a b
              Fmt.(option ~none:(any "none") int)
              got
              Fmt.(option ~none:(any "none") int)
              expected
          else true)
        ops)

let tests =
  [
    Alcotest.test_case "SACK: what a report newly covers" `Quick sack_newly;
    Alcotest.test_case "RACK records: bytes in flight, splits, work per ACK" `Quick rack_records;
    Alcotest.test_case "RACK: the next lost segment in constant work when there is none" `Quick
      rack_next_lost_work;
    rack_next_lost_model;
    Alcotest.test_case "RACK's reordering window: grows once a round trip, decays" `Quick
      rack_reo_wnd;
    Alcotest.test_case "sequence numbers wrap" `Quick seq_wrap;
    seq_props;
    codec_roundtrip;
    codec_random_bytes;
    codec_mutations;
    Alcotest.test_case "malformed headers and options" `Quick codec_errors;
    Alcotest.test_case "checksum: RFC 1071 vectors" `Quick checksum_vectors;
    checksum_model;
    Alcotest.test_case "RTO: RFC 6298 estimator, floor, ceiling, backoff" `Quick rto_rfc6298;
    sndbuf_model;
    reass_model;
    Alcotest.test_case "out-of-order queue bound and SACK order" `Quick reass_bound;
    reass_reference;
    Alcotest.test_case "out-of-order queue: bounded work against a thousand holes" `Quick
      reass_hostile;
    Alcotest.test_case "SACK scoreboard: IsLost, pipe, NextSeg" `Quick sack_scoreboard;
  ]
