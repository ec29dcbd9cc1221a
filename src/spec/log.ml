type kind = [ `Cast | `Send ]

type event =
  | View of { me : string; view : string; members : string list }
  | Cast of { me : string; view : string; len : int; digest : string }
  | Send of { me : string; view : string; dst : string; len : int; digest : string }
  | Deliver of {
      me : string;
      view : string;
      from : string;
      kind : kind;
      len : int;
      digest : string;
    }
  | Exit of { me : string }

let me = function
  | View { me; _ } | Cast { me; _ } | Send { me; _ } | Deliver { me; _ } | Exit { me } -> me

let equal (a : event) (b : event) = a = b
let kind_name = function `Cast -> "cast" | `Send -> "send"
let pp_kind ppf k = Fmt.string ppf (kind_name k)

(* Writing *)

let add_json_string b s =
  Buffer.add_char b '"';
  String.iter
    (function
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | '\n' -> Buffer.add_string b "\\n"
      | '\r' -> Buffer.add_string b "\\r"
      | '\t' -> Buffer.add_string b "\\t"
      | '\b' -> Buffer.add_string b "\\b"
      | '\012' -> Buffer.add_string b "\\f"
      | c when Char.code c < 0x20 -> Buffer.add_string b (Printf.sprintf "\\u%04x" (Char.code c))
      | c -> Buffer.add_char b c)
    s;
  Buffer.add_char b '"'

let to_line e =
  let b = Buffer.create 128 in
  let str k v =
    Buffer.add_string b ",\"";
    Buffer.add_string b k;
    Buffer.add_string b "\":";
    add_json_string b v
  in
  let int k v = Buffer.add_string b (Printf.sprintf ",\"%s\":%d" k v) in
  let head ev me =
    Buffer.add_string b "{\"ev\":";
    add_json_string b ev;
    str "me" me
  in
  (match e with
  | View { me; view; members } ->
      head "view" me;
      str "view" view;
      Buffer.add_string b ",\"members\":[";
      List.iteri
        (fun i m ->
          if i > 0 then Buffer.add_char b ',';
          add_json_string b m)
        members;
      Buffer.add_char b ']'
  | Cast { me; view; len; digest } ->
      head "cast" me;
      str "view" view;
      int "len" len;
      str "digest" digest
  | Send { me; view; dst; len; digest } ->
      head "send" me;
      str "view" view;
      str "to" dst;
      int "len" len;
      str "digest" digest
  | Deliver { me; view; from; kind; len; digest } ->
      head "deliver" me;
      str "view" view;
      str "from" from;
      str "kind" (kind_name kind);
      int "len" len;
      str "digest" digest
  | Exit { me } -> head "exit" me);
  Buffer.add_char b '}';
  Buffer.contents b

let pp ppf e = Fmt.string ppf (to_line e)

let output oc e =
  output_string oc (to_line e);
  output_char oc '\n';
  flush oc

(* Reading: a strict parser for one flat JSON object whose values are
   strings, non-negative integers or arrays of strings. Internal failures
   carry the column (from 1) and are caught in [of_line]. *)

type value = Str of string | Int of int | Strs of string list

exception Fail of int * string

let fail pos fmt = Printf.ksprintf (fun s -> raise (Fail (pos + 1, s))) fmt
let bad fmt = Printf.ksprintf (fun s -> raise (Fail (0, s))) fmt

let utf8_encode b u =
  let add i = Buffer.add_char b (Char.unsafe_chr i) in
  if u < 0x80 then add u
  else if u < 0x800 then (
    add (0xc0 lor (u lsr 6));
    add (0x80 lor (u land 0x3f)))
  else if u < 0x10000 then (
    add (0xe0 lor (u lsr 12));
    add (0x80 lor ((u lsr 6) land 0x3f));
    add (0x80 lor (u land 0x3f)))
  else (
    add (0xf0 lor (u lsr 18));
    add (0x80 lor ((u lsr 12) land 0x3f));
    add (0x80 lor ((u lsr 6) land 0x3f));
    add (0x80 lor (u land 0x3f)))

let parse_object s =
  let n = String.length s in
  let pos = ref 0 in
  let peek () = if !pos < n then Some s.[!pos] else None in
  let rec skip_ws () =
    match peek () with
    | Some (' ' | '\t' | '\n' | '\r') ->
        incr pos;
        skip_ws ()
    | _ -> ()
  in
  let describe = function
    | None -> "end of line"
    | Some c when Char.code c >= 0x20 && Char.code c < 0x7f -> Printf.sprintf "'%c'" c
    | Some c -> Printf.sprintf "byte 0x%02x" (Char.code c)
  in
  let expect c =
    skip_ws ();
    match peek () with
    | Some c' when c' = c -> incr pos
    | other -> fail !pos "expected '%c', found %s" c (describe other)
  in
  let hex4 () =
    if !pos + 4 > n then fail !pos "truncated \\u escape";
    let v = ref 0 in
    for i = 0 to 3 do
      let d =
        match s.[!pos + i] with
        | '0' .. '9' as c -> Char.code c - 48
        | 'a' .. 'f' as c -> Char.code c - 87
        | 'A' .. 'F' as c -> Char.code c - 55
        | _ -> fail (!pos + i) "bad hex digit in \\u escape"
      in
      v := (!v * 16) + d
    done;
    pos := !pos + 4;
    !v
  in
  (* Copies one UTF-8 sequence starting at [!pos], checking it is valid
     (shortest form, no surrogates, at most U+10FFFF). *)
  let utf8_raw b =
    let start = !pos in
    let byte i =
      if start + i < n then Char.code s.[start + i] else fail (start + i) "truncated UTF-8"
    in
    let c0 = byte 0 in
    let cont i =
      let c = byte i in
      if c land 0xc0 <> 0x80 then fail (start + i) "invalid UTF-8";
      c land 0x3f
    in
    let len, u =
      if c0 < 0x80 then (1, c0)
      else if c0 land 0xe0 = 0xc0 then (2, ((c0 land 0x1f) lsl 6) lor cont 1)
      else if c0 land 0xf0 = 0xe0 then (3, ((c0 land 0x0f) lsl 12) lor (cont 1 lsl 6) lor cont 2)
      else if c0 land 0xf8 = 0xf0 then
        (4, ((c0 land 0x07) lsl 18) lor (cont 1 lsl 12) lor (cont 2 lsl 6) lor cont 3)
      else fail start "invalid UTF-8"
    in
    let min = match len with 1 -> 0 | 2 -> 0x80 | 3 -> 0x800 | _ -> 0x10000 in
    if u < min || u > 0x10ffff || (u >= 0xd800 && u <= 0xdfff) then fail start "invalid UTF-8";
    Buffer.add_string b (String.sub s start len);
    pos := start + len
  in
  let string () =
    skip_ws ();
    (match peek () with
    | Some '"' -> incr pos
    | other -> fail !pos "expected a string, found %s" (describe other));
    let b = Buffer.create 32 in
    let rec loop () =
      match peek () with
      | None -> fail !pos "unterminated string"
      | Some '"' -> incr pos
      | Some '\\' ->
          let at = !pos in
          incr pos;
          (match peek () with
          | Some '"' -> Buffer.add_char b '"'; incr pos
          | Some '\\' -> Buffer.add_char b '\\'; incr pos
          | Some '/' -> Buffer.add_char b '/'; incr pos
          | Some 'b' -> Buffer.add_char b '\b'; incr pos
          | Some 'f' -> Buffer.add_char b '\012'; incr pos
          | Some 'n' -> Buffer.add_char b '\n'; incr pos
          | Some 'r' -> Buffer.add_char b '\r'; incr pos
          | Some 't' -> Buffer.add_char b '\t'; incr pos
          | Some 'u' ->
              incr pos;
              let u = hex4 () in
              if u >= 0xd800 && u <= 0xdbff then begin
                if !pos + 1 < n && s.[!pos] = '\\' && s.[!pos + 1] = 'u' then begin
                  pos := !pos + 2;
                  let lo = hex4 () in
                  if lo < 0xdc00 || lo > 0xdfff then fail at "unpaired surrogate in \\u escape";
                  utf8_encode b (0x10000 + ((u - 0xd800) lsl 10) + (lo - 0xdc00))
                end
                else fail at "unpaired surrogate in \\u escape"
              end
              else if u >= 0xdc00 && u <= 0xdfff then fail at "unpaired surrogate in \\u escape"
              else utf8_encode b u
          | other -> fail !pos "bad escape %s" (describe other));
          loop ()
      | Some c when Char.code c < 0x20 -> fail !pos "unescaped control character in string"
      | Some _ ->
          utf8_raw b;
          loop ()
    in
    loop ();
    Buffer.contents b
  in
  let integer () =
    let start = !pos in
    let rec digits () =
      match peek () with
      | Some ('0' .. '9') ->
          incr pos;
          digits ()
      | _ -> ()
    in
    digits ();
    let len = !pos - start in
    if len > 1 && s.[start] = '0' then fail start "leading zero in number";
    (match peek () with
    | Some ('.' | 'e' | 'E') -> fail !pos "expected an integer"
    | _ -> ());
    match if len > 19 then None else int_of_string_opt (String.sub s start len) with
    | Some i -> i
    | None -> fail start "number too large"
  in
  let value key =
    skip_ws ();
    match peek () with
    | Some '"' -> Str (string ())
    | Some ('0' .. '9') -> Int (integer ())
    | Some '-' -> fail !pos "%S: expected a non-negative integer" key
    | Some '[' ->
        incr pos;
        skip_ws ();
        if peek () = Some ']' then (
          incr pos;
          Strs [])
        else
          let rec items acc =
            let v = string () in
            skip_ws ();
            match peek () with
            | Some ',' ->
                incr pos;
                items (v :: acc)
            | Some ']' ->
                incr pos;
                Strs (List.rev (v :: acc))
            | other -> fail !pos "expected ',' or ']', found %s" (describe other)
          in
          items []
    | other -> fail !pos "%S: unexpected %s (values are strings, integers or string arrays)" key
                 (describe other)
  in
  expect '{';
  skip_ws ();
  let fields =
    if peek () = Some '}' then (
      incr pos;
      [])
    else
      let rec members acc =
        let at = !pos in
        let k = string () in
        if List.mem_assoc k acc then fail at "repeated key %S" k;
        expect ':';
        let v = value k in
        skip_ws ();
        match peek () with
        | Some ',' ->
            incr pos;
            members ((k, (at, v)) :: acc)
        | Some '}' ->
            incr pos;
            List.rev ((k, (at, v)) :: acc)
        | other -> fail !pos "expected ',' or '}', found %s" (describe other)
      in
      members []
  in
  skip_ws ();
  if !pos < n then fail !pos "trailing characters after the object";
  fields

let is_digest d =
  String.length d = 16
  && String.for_all (function '0' .. '9' | 'a' .. 'f' -> true | _ -> false) d

let event_of_fields fields =
  let field k =
    match List.assoc_opt k fields with Some (_, v) -> v | None -> bad "missing key %S" k
  in
  let str k =
    match field k with
    | Str "" -> bad "%S: empty string" k
    | Str s -> s
    | _ -> bad "%S: expected a string" k
  in
  let int k = match field k with Int i -> i | _ -> bad "%S: expected an integer" k in
  let digest () =
    let d = match field "digest" with Str d -> d | _ -> bad "\"digest\": expected a string" in
    if is_digest d then d else bad "\"digest\": expected 16 lower-case hex digits, found %S" d
  in
  let only ev keys =
    List.iter
      (fun (k, (at, _)) ->
        if not (List.mem k keys) then fail at "unknown key %S for event %S" k ev)
      fields
  in
  let ev = match field "ev" with Str s -> s | _ -> bad "\"ev\": expected a string" in
  match ev with
  | "view" ->
      only ev [ "ev"; "me"; "view"; "members" ];
      let members =
        match field "members" with
        | Strs l ->
            if List.mem "" l then bad "\"members\": empty member name";
            l
        | _ -> bad "\"members\": expected an array of strings"
      in
      View { me = str "me"; view = str "view"; members }
  | "cast" ->
      only ev [ "ev"; "me"; "view"; "len"; "digest" ];
      Cast { me = str "me"; view = str "view"; len = int "len"; digest = digest () }
  | "send" ->
      only ev [ "ev"; "me"; "view"; "to"; "len"; "digest" ];
      Send { me = str "me"; view = str "view"; dst = str "to"; len = int "len"; digest = digest () }
  | "deliver" ->
      only ev [ "ev"; "me"; "view"; "from"; "kind"; "len"; "digest" ];
      let kind =
        match field "kind" with
        | Str "cast" -> `Cast
        | Str "send" -> `Send
        | _ -> bad "\"kind\": expected \"cast\" or \"send\""
      in
      let me = str "me" and view = str "view" and from = str "from" in
      Deliver { me; view; from; kind; len = int "len"; digest = digest () }
  | "exit" ->
      only ev [ "ev"; "me" ];
      Exit { me = str "me" }
  | other -> bad "unknown event %S" other

let of_line s =
  match event_of_fields (parse_object s) with
  | e -> Ok e
  | exception Fail (0, msg) -> Error msg
  | exception Fail (col, msg) -> Error (Printf.sprintf "column %d: %s" col msg)

let read_file path =
  match open_in_bin path with
  | exception Sys_error e -> Error e
  | ic ->
      let rec loop lineno acc =
        match input_line ic with
        | exception End_of_file -> Ok (List.rev acc)
        | line -> (
            match of_line line with
            | Ok e -> loop (lineno + 1) (e :: acc)
            | Error e -> Error (Printf.sprintf "%s:%d: %s" path lineno e))
      in
      let r = try loop 1 [] with Sys_error e -> Error e in
      close_in_noerr ic;
      r
