(* Codecs: round trips, totality on garbage, edge cases. *)

open Consort
open Util
module G = QCheck.Gen
module P = QCheck.Print

type packed =
  | P : { name : string; codec : 'a Codec.t; gen : 'a G.t; print : 'a -> string } -> packed

(* Integers of every bit length, not just small ones. *)
let gen_nat = G.(map2 (fun b x -> (x land max_int) lsr b) (int_range 0 62) int)
let gen_int = G.(map2 (fun b x -> x asr b) (int_range 0 62) int)

let gen_edge_int =
  G.(
    oneof
      [
        gen_int;
        oneofl [ 0; 1; -1; 63; 64; -64; -65; 127; 128; max_int; min_int; max_int - 1; min_int + 1 ];
      ])

let gen_edge_nat =
  G.(oneof [ gen_nat; oneofl [ 0; 1; 127; 128; 16383; 16384; max_int; max_int - 1 ] ])

let gen_str = G.(string_size ~gen:char (oneof [ int_range 0 20; int_range 120 300 ]))
let gen_small_str = G.(string_size ~gen:char (int_range 0 10))

type shape = Circle of int | Rect of int * int | Label of string | Empty

let print_shape = function
  | Circle r -> Printf.sprintf "Circle %d" r
  | Rect (w, h) -> Printf.sprintf "Rect (%d, %d)" w h
  | Label s -> Printf.sprintf "Label %S" s
  | Empty -> "Empty"

let shape =
  Codec.(
    union "shape"
      [
        case 0 "circle" varint (function Circle r -> Some r | _ -> None) (fun r -> Circle r);
        case 1 "rect" (pair uint16 uint16)
          (function Rect (w, h) -> Some (w, h) | _ -> None)
          (fun (w, h) -> Rect (w, h));
        case 2 "label" (string ()) (function Label s -> Some s | _ -> None) (fun s -> Label s);
        case 7 "empty" unit (function Empty -> Some () | _ -> None) (fun () -> Empty);
      ])

let gen_shape =
  G.(
    oneof
      [
        map (fun r -> Circle r) gen_nat;
        map2 (fun w h -> Rect (w, h)) (int_range 0 0xffff) (int_range 0 0xffff);
        map (fun s -> Label s) gen_small_str;
        return Empty;
      ])

(* A range [lo, hi] with lo <= hi, written by hand over cursors. *)
type range = { lo : int; hi : int }

let range =
  Codec.custom ~name:"range"
    ~size:(fun r -> Codec.size Codec.zigzag r.lo + Codec.size Codec.varint (r.hi - r.lo))
    ~write:(fun w r ->
      Codec.write Codec.zigzag w r.lo;
      Codec.write Codec.varint w (r.hi - r.lo))
    ~read:(fun rd ->
      let lo = Codec.read Codec.zigzag rd in
      let d = Codec.read Codec.varint rd in
      let hi = lo + d in
      if hi < lo then Codec.fail "range: overflow";
      { lo; hi })

let gen_range =
  G.(map2 (fun lo d -> { lo; hi = lo + d }) (int_range (-1000000) 1000000) (int_range 0 1000000))

let even =
  Codec.conv ~name:"even" Fun.id (fun x -> if x mod 2 = 0 then Ok x else Error "odd") Codec.varint

let char = Codec.map ~name:"char" Char.code Char.chr Codec.uint8

let codecs =
  let open Codec in
  [
    P { name = "unit"; codec = unit; gen = G.unit; print = P.unit };
    P { name = "bool"; codec = bool; gen = G.bool; print = P.bool };
    P { name = "uint8"; codec = uint8; gen = G.int_range 0 255; print = P.int };
    P { name = "uint16"; codec = uint16; gen = G.int_range 0 0xffff; print = P.int };
    P
      {
        name = "uint32";
        codec = uint32;
        gen = G.(oneof [ int_range 0 0xffff_ffff; oneofl [ 0; 0xffff_ffff; 0x8000_0000 ] ]);
        print = P.int;
      };
    P
      {
        name = "int64";
        codec = int64;
        gen = G.(oneof [ ui64; oneofl [ 0L; -1L; Int64.max_int; Int64.min_int ] ]);
        print = Int64.to_string;
      };
    P { name = "varint"; codec = varint; gen = gen_edge_nat; print = P.int };
    P { name = "zigzag"; codec = zigzag; gen = gen_edge_int; print = P.int };
    P { name = "string"; codec = string (); gen = gen_str; print = P.string };
    P
      {
        name = "string ~max:5";
        codec = string ~max:5 ();
        gen = G.(string_size ~gen:char (int_range 0 5));
        print = P.string;
      };
    P
      {
        name = "fixed_string";
        codec = fixed_string 4;
        gen = G.(string_size ~gen:char (return 4));
        print = P.string;
      };
    P
      {
        name = "option";
        codec = option (pair uint8 (string ()));
        gen = G.(opt (pair (int_range 0 255) gen_small_str));
        print = P.(option (pair int string));
      };
    P
      {
        name = "pair";
        codec = pair varint bool;
        gen = G.pair gen_nat G.bool;
        print = P.(pair int bool);
      };
    P
      {
        name = "tup3";
        codec = tup3 uint16 zigzag (option bool);
        gen = G.(triple (int_range 0 0xffff) gen_int (opt bool));
        print = P.(triple int int (option bool));
      };
    P
      {
        name = "tup4";
        codec = tup4 bool uint8 uint32 (string ());
        gen = G.(quad bool (int_range 0 255) (int_range 0 0xffff_ffff) gen_small_str);
        print = P.(quad bool int int string);
      };
    P
      {
        name = "list";
        codec = list varint;
        gen = G.(list_size (oneof [ int_range 0 10; int_range 127 140 ]) gen_nat);
        print = P.(list int);
      };
    P
      {
        name = "list unit";
        codec = list unit;
        gen = G.(list_size (int_range 0 200) unit);
        print = P.(list unit);
      };
    P
      {
        name = "list ~max:3";
        codec = list ~max:3 uint8;
        gen = G.(list_size (int_range 0 3) (int_range 0 255));
        print = P.(list int);
      };
    P
      {
        name = "array";
        codec = array zigzag;
        gen = G.(array_size (int_range 0 10) gen_int);
        print = P.(array int);
      };
    P { name = "conv"; codec = even; gen = G.map (fun x -> x land lnot 1) gen_nat; print = P.int };
    P { name = "map"; codec = char; gen = G.char; print = P.char };
    P { name = "union"; codec = shape; gen = gen_shape; print = print_shape };
    P
      {
        name = "custom";
        codec = range;
        gen = gen_range;
        print = (fun r -> Printf.sprintf "[%d,%d]" r.lo r.hi);
      };
    P
      {
        name = "nested";
        codec = list (option (pair zigzag (list shape)));
        gen =
          G.(list_size (int_range 0 5) (opt (pair gen_int (list_size (int_range 0 3) gen_shape))));
        print = P.(list (option (pair int (list print_shape))));
      };
  ]

let is_truncated = function Error (`Truncated _) -> true | _ -> false

(* Encoding has the announced size, decodes back (alone, at an offset, and
   followed by other bytes), and every strict prefix is truncated. *)
let roundtrip (P { name; codec; gen; print }) =
  qtest ~count:300 ("roundtrip " ^ name) (QCheck.make ~print gen) (fun v ->
      let s = Codec.encode_string codec v in
      let n = String.length s in
      if n <> Codec.size codec v then
        QCheck.Test.fail_reportf "size %d, wrote %d" (Codec.size codec v) n;
      (match Codec.decode_string codec s with
      | Ok v' when v' = v -> ()
      | Ok v' -> QCheck.Test.fail_reportf "decoded %s" (print v')
      | Error e -> QCheck.Test.fail_reportf "decode: %a" Codec.pp_error e);
      (match Codec.decode codec (Cstruct.of_string ("ab" ^ s ^ "tail")) 2 with
      | Ok (v', off) when v' = v && off = 2 + n -> ()
      | Ok (_, off) -> QCheck.Test.fail_reportf "at offset: stopped at %d" off
      | Error e -> QCheck.Test.fail_reportf "at offset: %a" Codec.pp_error e);
      let buf = Bytes.make (n + 3) '\000' in
      if Codec.encode_into codec buf 3 v <> n + 3 then QCheck.Test.fail_report "encode_into offset";
      if Bytes.sub_string buf 3 n <> s then QCheck.Test.fail_report "encode_into bytes";
      for k = 0 to n - 1 do
        if not (is_truncated (Codec.decode_string codec (String.sub s 0 k))) then
          QCheck.Test.fail_reportf "prefix of %d bytes not truncated" k
      done;
      true)

(* Arbitrary bytes, and valid encodings with bytes flipped, cut or added:
   decoding never raises, and whatever decodes re-encodes to the bytes it
   consumed (encodings are canonical). *)
let garbage (P { name; codec; gen; print = _ }) =
  let mutate =
    G.(
      pair gen (pair (int_range 0 3) (pair nat char)) >|= fun (v, (how, (i, c))) ->
      let s = Codec.encode_string codec v in
      let n = String.length s in
      match how with
      | 0 when n > 0 -> String.mapi (fun j x -> if j = i mod n then c else x) s
      | 1 when n > 0 -> String.sub s 0 (i mod n)
      | 2 -> s ^ String.make 1 c
      | _ -> String.make 1 c ^ s)
  in
  let gen =
    G.(
      oneof
        [
          string_size ~gen:char (int_range 0 40);
          string_size ~gen:(map Char.chr (int_range 0x80 0xff)) (int_range 0 12);
          mutate;
        ])
  in
  qtest ~count:500 ("random bytes " ^ name) (QCheck.make ~print:P.string gen) (fun s ->
      match Codec.decode codec (Cstruct.of_string s) 0 with
      | Error _ -> true
      | Ok (v, off) -> (
          if off > String.length s then QCheck.Test.fail_report "consumed past the end";
          if Codec.encode_string codec v <> String.sub s 0 off then
            QCheck.Test.fail_report "not canonical";
          match Codec.decode_string codec s with
          | Ok _ -> off = String.length s || QCheck.Test.fail_report "exact accepted trailing bytes"
          | Error (`Trailing k) -> k = String.length s - off
          | Error _ -> QCheck.Test.fail_report "exact disagrees with decode"))

let ok_int = Alcotest.(result int reject)

let err_kind = function
  | Ok _ -> "ok"
  | Error (`Truncated _) -> "truncated"
  | Error (`Malformed _) -> "malformed"
  | Error (`Trailing n) -> Printf.sprintf "trailing %d" n

let check_err what expected r = Alcotest.(check string) what expected (err_kind r)

let varint_edges () =
  let s = Codec.encode_string Codec.varint max_int in
  Alcotest.(check string) "max_int bytes" (String.make 8 '\xff' ^ "\x3f") s;
  Alcotest.(check ok_int) "max_int back" (Ok max_int) (Codec.decode_string Codec.varint s);
  Alcotest.(check ok_int) "zero" (Ok 0) (Codec.decode_string Codec.varint "\x00");
  Alcotest.(check ok_int) "300" (Ok 300) (Codec.decode_string Codec.varint "\xac\x02");
  Alcotest.(check string) "300 encodes" "\xac\x02" (Codec.encode_string Codec.varint 300);
  check_err "overlong zero" "malformed" (Codec.decode_string Codec.varint "\x80\x00");
  check_err "overlong one" "malformed" (Codec.decode_string Codec.varint "\x81\x80\x00");
  check_err "past 63 bits" "malformed"
    (Codec.decode_string Codec.varint (String.make 8 '\xff' ^ "\x7f"));
  check_err "10 bytes" "malformed"
    (Codec.decode_string Codec.varint (String.make 9 '\x80' ^ "\x01"));
  check_err "continuation at end" "truncated" (Codec.decode_string Codec.varint "\x80\x80");
  check_err "empty" "truncated" (Codec.decode_string Codec.varint "");
  raises_invalid "negative encode" (fun () -> Codec.encode Codec.varint (-1));
  raises_invalid "negative encode_into" (fun () ->
      Codec.encode_into Codec.varint (Bytes.create 10) 0 min_int);
  Alcotest.(check (list int))
    "varint_size" [ 1; 1; 2; 2; 3; 9 ]
    (List.map Codec.varint_size [ 0; 127; 128; 16383; 16384; max_int ])

(* [read_varints] and [write_varints] against [varint] one number at a
   time: the same bytes, the same numbers, the same errors on every
   truncation and on garbage, from a buffer that does not start at 0. *)
let varints_one_pass () =
  let st = Random.State.make [| 11 |] in
  let one n =
    Codec.custom ~name:"one"
      ~size:(fun _ -> 0)
      ~write:(fun _ _ -> ())
      ~read:(fun r -> Array.init n (fun _ -> Codec.read Codec.varint r))
  and pass n =
    Codec.custom ~name:"pass"
      ~size:(fun _ -> 0)
      ~write:(fun _ _ -> ())
      ~read:(fun r ->
        let a = Array.make n 0 in
        Codec.read_varints r a;
        a)
  in
  let same what n s =
    let cs = Cstruct.sub (Cstruct.of_string ("\x80\x81" ^ s ^ "\x82")) 2 (String.length s) in
    let show = function
      | Ok (a, pos) ->
          Printf.sprintf "ok %s at %d"
            (String.concat "," (List.map string_of_int (Array.to_list a)))
            pos
      | Error e -> Fmt.str "%a" Codec.pp_error e
    in
    let expected = show (Codec.decode (one n) cs 0) in
    Alcotest.(check string) what expected (show (Codec.decode (pass n) cs 0));
    (* [read_varints_at], from a view that starts one byte before. *)
    let at = Cstruct.sub (Cstruct.of_string ("\x80\x81" ^ s ^ "\x82")) 1 (String.length s + 1) in
    let a = Array.make n 0 in
    Alcotest.(check string)
      (what ^ ", in place") expected
      (show
         (match Codec.read_varints_at at 1 a with
         | pos -> Ok (a, pos - 1)
         | exception Codec.Decode_error e -> Error e))
  in
  let gen () =
    match Random.State.int st 4 with
    | 0 -> Random.State.int st 128
    | 1 -> 128 + Random.State.int st 16256
    | 2 -> [| 0; 127; 128; 16383; 16384; max_int; max_int - 1; 1 lsl 35 |].(Random.State.int st 8)
    | _ -> (Random.State.bits st lsr Random.State.int st 30) lor (Random.State.bits st lsl 30)
  in
  for _ = 1 to 2000 do
    let n = Random.State.int st 6 in
    let a = Array.init n (fun _ -> gen ()) in
    let expected =
      String.concat "" (Array.to_list (Array.map (Codec.encode_string Codec.varint) a))
    in
    Alcotest.(check int) "size" (String.length expected) (Codec.varints_size a);
    let b = Bytes.make (String.length expected + 3) 'z' in
    let w = { Codec.W.buf = b; pos = 3 } in
    Codec.write_varints w a;
    Alcotest.(check string) "bytes" expected (Bytes.sub_string b 3 (String.length expected));
    Alcotest.(check int) "end" (Bytes.length b) w.pos;
    let b = Bytes.make (String.length expected + 5) 'z' in
    Alcotest.(check int) "end, in place" (String.length expected + 4) (Codec.write_varints_at b 4 a);
    Alcotest.(check string) "bytes, in place" ("zzzz" ^ expected ^ "z") (Bytes.to_string b);
    for cut = 0 to String.length expected do
      same "truncated" n (String.sub expected 0 cut)
    done;
    same "garbage"
      (1 + Random.State.int st 3)
      (String.init (Random.State.int st 12) (fun _ -> Char.chr (Random.State.int st 256)))
  done;
  List.iter
    (fun s -> same s 1 s)
    [ "\x80\x00"; "\x81\x80\x00"; String.make 8 '\xff' ^ "\x7f"; String.make 9 '\x80' ^ "\x01"; "" ];
  List.iter
    (fun pos ->
      Alcotest.(check bool)
        (Printf.sprintf "in place from %d" pos)
        true
        (match Codec.read_varints_at (Cstruct.of_string "\x01\x02") pos [| 0 |] with
        | _ -> false
        | exception Codec.Decode_error (`Truncated _) -> true))
    [ -1; 2; 3 ];
  raises_invalid "negative" (fun () -> Codec.varints_size [| 1; -1 |]);
  raises_invalid "negative write" (fun () ->
      Codec.write_varints { Codec.W.buf = Bytes.create 9; pos = 0 } [| min_int |])

let zigzag_edges () =
  let enc = Codec.encode_string Codec.zigzag in
  Alcotest.(check string) "0" "\x00" (enc 0);
  Alcotest.(check string) "-1" "\x01" (enc (-1));
  Alcotest.(check string) "1" "\x02" (enc 1);
  Alcotest.(check string) "-64" "\x7f" (enc (-64));
  Alcotest.(check int) "-65 takes two" 2 (String.length (enc (-65)));
  List.iter
    (fun v ->
      Alcotest.(check int) "nine bytes" 9 (String.length (enc v));
      Alcotest.(check ok_int) (string_of_int v) (Ok v) (Codec.decode_string Codec.zigzag (enc v)))
    [ min_int; max_int ];
  check_err "10 bytes" "malformed"
    (Codec.decode_string Codec.zigzag (String.make 9 '\xff' ^ "\x01"))

let scalar_edges () =
  check_err "bool 2" "malformed" (Codec.decode_string Codec.bool "\x02");
  check_err "option tag 2" "malformed" (Codec.decode_string (Codec.option Codec.bool) "\x02\x00");
  raises_invalid "uint8 256" (fun () -> Codec.encode Codec.uint8 256);
  raises_invalid "uint8 -1" (fun () -> Codec.encode Codec.uint8 (-1));
  raises_invalid "uint16 65536" (fun () -> Codec.encode Codec.uint16 0x10000);
  raises_invalid "uint32 2^32" (fun () -> Codec.encode Codec.uint32 0x1_0000_0000);
  Alcotest.(check string)
    "uint32 big-endian" "\x01\x02\x03\x04"
    (Codec.encode_string Codec.uint32 0x01020304);
  Alcotest.(check ok_int)
    "uint32 high bit" (Ok 0xffff_fffe)
    (Codec.decode_string Codec.uint32 "\xff\xff\xff\xfe");
  Alcotest.(check string) "uint16 big-endian" "\x12\x34" (Codec.encode_string Codec.uint16 0x1234);
  raises_invalid "fixed_string wrong length" (fun () -> Codec.encode (Codec.fixed_string 3) "ab");
  check_err "fixed_string short" "truncated" (Codec.decode_string (Codec.fixed_string 3) "ab")

let limits () =
  let s3 = Codec.string ~max:3 () in
  Alcotest.(check (result string reject)) "at max" (Ok "abc") (Codec.decode_string s3 "\x03abc");
  check_err "string over max" "malformed" (Codec.decode_string s3 "\x04abcd");
  raises_invalid "encode string over max" (fun () -> Codec.encode s3 "abcd");
  check_err "string length beyond input" "truncated"
    (Codec.decode_string (Codec.string ()) "\x05ab");
  check_err "huge string length" "malformed"
    (Codec.decode_string (Codec.string ()) (String.make 8 '\xff' ^ "\x3f"));
  let l2 = Codec.list ~max:2 Codec.uint8 in
  check_err "list count over max" "malformed" (Codec.decode_string l2 "\x03\x01\x02\x03");
  raises_invalid "encode list over max" (fun () -> Codec.encode l2 [ 1; 2; 3 ]);
  check_err "array count over max" "malformed"
    (Codec.decode_string (Codec.array ~max:2 Codec.uint8) "\x03\x01\x02\x03");
  (* Counts that do not fit a non-negative int must not loop or allocate. *)
  let neg = String.make 8 '\xff' ^ "\x7f" in
  check_err "string negative length" "malformed" (Codec.decode_string (Codec.string ()) neg);
  check_err "list of units negative count" "malformed"
    (Codec.decode_string (Codec.list Codec.unit) neg);
  check_err "list negative count" "malformed" (Codec.decode_string (Codec.list Codec.uint8) neg);
  Alcotest.(check (result (list unit) reject))
    "list of units at max"
    (Ok (List.init 4096 ignore))
    (Codec.decode_string (Codec.list Codec.unit) "\x80\x20")

let unions () =
  check_err "unknown tag" "malformed" (Codec.decode_string shape "\x03\x00");
  check_err "tag only" "truncated" (Codec.decode_string shape "\x01\x00");
  Alcotest.(check string) "tag then payload" "\x07" (Codec.encode_string shape Empty);
  raises_invalid "duplicate tags" (fun () ->
      Codec.(
        union "dup"
          [ case 1 "a" unit (fun () -> Some ()) Fun.id; case 1 "b" unit (fun () -> Some ()) Fun.id ]));
  raises_invalid "tag 256" (fun () -> Codec.case 256 "x" Codec.unit (fun () -> Some ()) Fun.id);
  let partial =
    Codec.(
      union "partial"
        [ case 0 "zero" unit (fun x -> if x = 0 then Some () else None) (fun () -> 0) ])
  in
  raises_invalid "no case for value" (fun () -> Codec.encode partial 1);
  check_err "conv refuses" "malformed" (Codec.decode_string even "\x03");
  (match Codec.decode_string even "\x03" with
  | Error (`Malformed why) -> check_contains "conv reason" ~sub:"odd" why
  | _ -> Alcotest.fail "conv");
  check_err "custom fail" "malformed"
    (Codec.decode_string range (Codec.encode_string Codec.(pair zigzag varint) (max_int, max_int)))

let running () =
  check_err "trailing" "trailing 2" (Codec.decode_string Codec.uint8 "\x01\x02\x03");
  check_err "trailing after list" "trailing 1"
    (Codec.decode_string (Codec.list Codec.uint8) "\x01\x05\x06");
  let cs = Cstruct.of_string "\x05\x06" in
  (match Codec.decode Codec.uint8 cs 1 with
  | Ok (6, 2) -> ()
  | _ -> Alcotest.fail "decode at offset 1");
  check_err "offset at end" "truncated" (Codec.decode Codec.uint8 cs 2);
  check_err "offset past end" "truncated" (Codec.decode Codec.unit cs 3);
  check_err "negative offset" "truncated" (Codec.decode Codec.unit cs (-1));
  Alcotest.(check bool) "unit at end" true (Codec.decode Codec.unit cs 2 = Ok ((), 2));
  Alcotest.(check string) "name" "varint list" (Codec.name (Codec.list Codec.varint));
  Alcotest.(check string)
    "pp truncated" "truncated uint8"
    (Fmt.str "%a" Codec.pp_error (`Truncated "uint8"));
  Alcotest.(check string)
    "pp trailing" "3 trailing bytes"
    (Fmt.str "%a" Codec.pp_error (`Trailing 3));
  Alcotest.(check string)
    "pp malformed" "malformed: x"
    (Fmt.str "%a" Codec.pp_error (`Malformed "x"));
  let r = { Codec.R.cs = Cstruct.of_string "abcd"; pos = 1 } in
  Alcotest.(check int) "remaining" 3 (Codec.R.remaining r)

let tests =
  List.map roundtrip codecs @ List.map garbage codecs
  @ [
      Alcotest.test_case "varint edges" `Quick varint_edges;
      Alcotest.test_case "varints in one pass" `Quick varints_one_pass;
      Alcotest.test_case "zigzag edges" `Quick zigzag_edges;
      Alcotest.test_case "scalar edges" `Quick scalar_edges;
      Alcotest.test_case "string and list limits" `Quick limits;
      Alcotest.test_case "union, conv, custom" `Quick unions;
      Alcotest.test_case "decode, decode_exact, printers" `Quick running;
    ]
