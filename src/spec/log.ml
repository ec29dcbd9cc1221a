type kind = [ `Cast | `Send ]

type event =
  | View of { t : int; me : string; view : string; members : string list }
  | Cast of { t : int; me : string; view : string; seq : int; len : int; digest : string }
  | Send of {
      t : int;
      me : string;
      view : string;
      dst : string;
      seq : int;
      len : int;
      digest : string;
    }
  | Deliver of {
      t : int;
      me : string;
      view : string;
      from : string;
      kind : kind;
      seq : int;
      len : int;
      digest : string;
    }
  | Block of { t : int; me : string; view : string }
  | Refused of {
      t : int;
      me : string;
      view : string;
      kind : kind;
      dst : string option;
      seq : int;
      len : int;
      digest : string;
      reason : string;
    }
  | Lost of { t : int; me : string; kind : kind; seq : int; reason : string }
  | Exit of { t : int; me : string }
  | Live of { t : int; me : string; casts : int }
  | Trans of { t : int; me : string; view : string; next : string option; members : string list }
  | Quorum of { t : int; me : string; view : string; primary : bool; votes : int; needed : int }

let me = function
  | View { me; _ }
  | Cast { me; _ }
  | Send { me; _ }
  | Deliver { me; _ }
  | Block { me; _ }
  | Refused { me; _ }
  | Lost { me; _ }
  | Exit { me; _ }
  | Live { me; _ }
  | Trans { me; _ }
  | Quorum { me; _ } ->
      me

let time = function
  | View { t; _ }
  | Cast { t; _ }
  | Send { t; _ }
  | Deliver { t; _ }
  | Block { t; _ }
  | Refused { t; _ }
  | Lost { t; _ }
  | Exit { t; _ }
  | Live { t; _ }
  | Trans { t; _ }
  | Quorum { t; _ } ->
      t

let equal (a : event) (b : event) = a = b
let kind_name = function `Cast -> "cast" | `Send -> "send"
let pp_kind ppf k = Fmt.string ppf (kind_name k)

(* Writing *)

let to_json e : Yojson.Safe.t =
  let s x = `String x and i x = `Int x in
  let head ev t me = [ ("ev", s ev); ("t", i t); ("me", s me) ] in
  `Assoc
    (match e with
    | View { t; me; view; members } ->
        head "view" t me @ [ ("view", s view); ("members", `List (List.map s members)) ]
    | Cast { t; me; view; seq; len; digest } ->
        head "cast" t me
        @ [ ("view", s view); ("seq", i seq); ("len", i len); ("digest", s digest) ]
    | Send { t; me; view; dst; seq; len; digest } ->
        head "send" t me
        @ [ ("view", s view); ("to", s dst); ("seq", i seq); ("len", i len); ("digest", s digest) ]
    | Deliver { t; me; view; from; kind; seq; len; digest } ->
        head "deliver" t me
        @ [
            ("view", s view);
            ("from", s from);
            ("kind", s (kind_name kind));
            ("seq", i seq);
            ("len", i len);
            ("digest", s digest);
          ]
    | Block { t; me; view } -> head "block" t me @ [ ("view", s view) ]
    | Refused { t; me; view; kind; dst; seq; len; digest; reason } ->
        head "refused" t me
        @ [ ("view", s view); ("kind", s (kind_name kind)) ]
        @ (match dst with Some d -> [ ("to", s d) ] | None -> [])
        @ [ ("seq", i seq); ("len", i len); ("digest", s digest); ("reason", s reason) ]
    | Lost { t; me; kind; seq; reason } ->
        head "lost" t me @ [ ("kind", s (kind_name kind)); ("seq", i seq); ("reason", s reason) ]
    | Exit { t; me } -> head "exit" t me
    | Live { t; me; casts } -> head "live" t me @ [ ("casts", i casts) ]
    | Trans { t; me; view; next; members } ->
        head "trans" t me
        @ [ ("view", s view) ]
        @ (match next with Some n -> [ ("next", s n) ] | None -> [])
        @ [ ("members", `List (List.map s members)) ]
    | Quorum { t; me; view; primary; votes; needed } ->
        head "quorum" t me
        @ [ ("view", s view); ("primary", `Bool primary); ("votes", i votes); ("needed", i needed) ])

let to_line e = Yojson.Safe.to_string (to_json e)
let pp ppf e = Fmt.string ppf (to_line e)

let output oc e =
  output_string oc (to_line e);
  output_char oc '\n';
  flush oc

(* Reading *)

type error =
  | Syntax of string
  | Not_an_object
  | Missing_key of string
  | Repeated_key of string
  | Bad_value of { key : string; expected : string }
  | Unknown_event of string

let pp_error ppf = function
  | Syntax m -> Fmt.pf ppf "not JSON: %s" m
  | Not_an_object -> Fmt.string ppf "not a JSON object"
  | Missing_key k -> Fmt.pf ppf "missing key %S" k
  | Repeated_key k -> Fmt.pf ppf "repeated key %S" k
  | Bad_value { key; expected } -> Fmt.pf ppf "%S: expected %s" key expected
  | Unknown_event ev -> Fmt.pf ppf "unknown event %S" ev

exception Bad of error

let bad e = raise (Bad e)

let is_digest d =
  String.length d = 16 && String.for_all (function '0' .. '9' | 'a' .. 'f' -> true | _ -> false) d

let event_of_fields fields =
  let rec dups = function
    | [] -> ()
    | (k, _) :: rest -> if List.mem_assoc k rest then bad (Repeated_key k) else dups rest
  in
  dups fields;
  let field k = match List.assoc_opt k fields with Some v -> v | None -> bad (Missing_key k) in
  let str k =
    match field k with
    | `String s when s <> "" -> s
    | _ -> bad (Bad_value { key = k; expected = "a non-empty string" })
  in
  let int k =
    match field k with
    | `Int n when n >= 0 -> n
    | _ -> bad (Bad_value { key = k; expected = "a non-negative integer below 2^62" })
  in
  let digest () =
    match field "digest" with
    | `String d when is_digest d -> d
    | _ -> bad (Bad_value { key = "digest"; expected = "16 lower-case hex digits" })
  in
  let kind () =
    match field "kind" with
    | `String "cast" -> `Cast
    | `String "send" -> `Send
    | _ -> bad (Bad_value { key = "kind"; expected = "\"cast\" or \"send\"" })
  in
  let strs k =
    match field k with
    | `List l ->
        List.map
          (function
            | `String s when s <> "" -> s
            | _ -> bad (Bad_value { key = k; expected = "an array of non-empty strings" }))
          l
    | _ -> bad (Bad_value { key = k; expected = "an array of non-empty strings" })
  in
  let ev =
    match field "ev" with
    | `String s -> s
    | _ -> bad (Bad_value { key = "ev"; expected = "a string" })
  in
  let t = int "t" and me = str "me" in
  match ev with
  | "view" -> View { t; me; view = str "view"; members = strs "members" }
  | "cast" ->
      Cast { t; me; view = str "view"; seq = int "seq"; len = int "len"; digest = digest () }
  | "send" ->
      let view = str "view" and dst = str "to" in
      Send { t; me; view; dst; seq = int "seq"; len = int "len"; digest = digest () }
  | "deliver" ->
      let view = str "view" and from = str "from" and kind = kind () in
      Deliver { t; me; view; from; kind; seq = int "seq"; len = int "len"; digest = digest () }
  | "block" -> Block { t; me; view = str "view" }
  | "refused" ->
      let view = str "view" and kind = kind () in
      let dst =
        match kind with
        | `Send -> Some (str "to")
        | `Cast -> if List.mem_assoc "to" fields then Some (str "to") else None
      in
      let seq = int "seq" and len = int "len" and digest = digest () in
      Refused { t; me; view; kind; dst; seq; len; digest; reason = str "reason" }
  | "lost" ->
      let kind = kind () and seq = int "seq" in
      Lost { t; me; kind; seq; reason = str "reason" }
  | "exit" -> Exit { t; me }
  | "live" -> Live { t; me; casts = int "casts" }
  | "trans" ->
      let view = str "view" in
      let next = if List.mem_assoc "next" fields then Some (str "next") else None in
      Trans { t; me; view; next; members = strs "members" }
  | "quorum" ->
      let view = str "view" in
      let primary =
        match field "primary" with
        | `Bool b -> b
        | _ -> bad (Bad_value { key = "primary"; expected = "true or false" })
      in
      let votes = int "votes" and needed = int "needed" in
      Quorum { t; me; view; primary; votes; needed }
  | other -> bad (Unknown_event other)

let one_line s = String.concat " " (List.filter (( <> ) "") (String.split_on_char '\n' s))

let of_line s =
  match Yojson.Safe.from_string s with
  | exception Yojson.Json_error m -> Error (Syntax (one_line m))
  | `Assoc fields -> ( try Ok (event_of_fields fields) with Bad e -> Error e)
  | _ -> Error Not_an_object

type file_error = Io of string | Line of { path : string; line : int; error : error }

let pp_file_error ppf = function
  | Io m -> Fmt.string ppf m
  | Line { path; line; error } -> Fmt.pf ppf "%s:%d: %a" path line pp_error error

let read_file path =
  match open_in_bin path with
  | exception Sys_error e -> Error (Io e)
  | ic ->
      let rec loop lineno acc =
        match input_line ic with
        | exception End_of_file -> Ok (List.rev acc)
        | line -> (
            let n = String.length line in
            let line' = if n > 0 && line.[n - 1] = '\r' then String.sub line 0 (n - 1) else line in
            match of_line line' with
            | Ok e -> loop (lineno + 1) (e :: acc)
            | Error error -> Error (Line { path; line = lineno; error }))
      in
      let r = try loop 1 [] with Sys_error e -> Error (Io (path ^ ": " ^ e)) in
      close_in_noerr ic;
      r
