open Consort_cap

type limits = { cpu_ms : int; memory_kib : int; run_ms : int }

type t = {
  arch : string;
  program : Cap.t;
  args : string list;
  caps : (string * Cap.t) list;
  limits : limits;
  hints : string list;
}

let arch_bytecode = "ocaml-bytecode"
let no_limits = { cpu_ms = 0; memory_kib = 0; run_ms = 0 }
let max_size = 65536
let max_args = 256
let max_args_bytes = 32768
let max_caps = 32
let max_hints = 8
let magic = "CPD"
let version = 1
let u32_max = 0xffff_ffff

let valid_name s =
  let n = String.length s in
  n >= 1 && n <= 32
  && String.for_all (function 'a' .. 'z' | '0' .. '9' | '_' | '.' | '-' -> true | _ -> false) s

let cap t name = List.assoc_opt name t.caps

let check t =
  let args_bytes = List.fold_left (fun a s -> a + String.length s) 0 t.args in
  if String.length t.arch = 0 || String.length t.arch > 64 then
    Error "the architecture name is empty or too long"
  else if List.length t.args > max_args then
    Error (Printf.sprintf "more than %d arguments" max_args)
  else if args_bytes > max_args_bytes then
    Error (Printf.sprintf "the arguments take more than %d bytes" max_args_bytes)
  else if List.exists (fun a -> String.length a > 0xffff) t.args then
    Error "an argument is too long"
  else if List.length t.caps > max_caps then
    Error (Printf.sprintf "more than %d named capabilities" max_caps)
  else if List.exists (fun (n, _) -> not (valid_name n)) t.caps then
    Error "a capability name is not 1-32 characters of a-z, 0-9, _ . -"
  else if
    let names = List.map fst t.caps in
    List.length (List.sort_uniq compare names) <> List.length names
  then Error "a capability name is given twice"
  else if
    List.length t.hints > max_hints
    || List.exists (fun h -> String.length h = 0 || String.length h > 64) t.hints
  then Error "too many or too long locate hints"
  else if
    List.exists
      (fun v -> v < 0 || v > u32_max)
      [ t.limits.cpu_ms; t.limits.memory_kib; t.limits.run_ms ]
  then Error "a limit is out of range"
  else Ok ()

let encode t =
  match check t with
  | Error e -> Error e
  | Ok () ->
      let b = Buffer.create 256 in
      let u8 n = Buffer.add_uint8 b n and u16 n = Buffer.add_uint16_be b n in
      let u32 n = Buffer.add_int32_be b (Int32.of_int n) in
      let str8 s =
        u8 (String.length s);
        Buffer.add_string b s
      in
      Buffer.add_string b magic;
      u8 version;
      str8 t.arch;
      Buffer.add_string b (Cap.to_raw t.program);
      u32 t.limits.cpu_ms;
      u32 t.limits.memory_kib;
      u32 t.limits.run_ms;
      u16 (List.length t.args);
      List.iter
        (fun a ->
          u16 (String.length a);
          Buffer.add_string b a)
        t.args;
      u8 (List.length t.caps);
      List.iter
        (fun (n, c) ->
          str8 n;
          Buffer.add_string b (Cap.to_raw c))
        t.caps;
      u8 (List.length t.hints);
      List.iter str8 t.hints;
      if Buffer.length b > max_size then
        Error (Printf.sprintf "the descriptor is larger than %d bytes" max_size)
      else Ok (Buffer.contents b)

exception Bad of string

let decode s =
  let len = String.length s in
  let pos = ref 0 in
  let need n what = if n < 0 || !pos + n > len then raise (Bad ("truncated descriptor: " ^ what)) in
  let take n what =
    need n what;
    let r = String.sub s !pos n in
    pos := !pos + n;
    r
  in
  let u8 what =
    need 1 what;
    let v = Char.code s.[!pos] in
    incr pos;
    v
  in
  let u16 what =
    need 2 what;
    let v = String.get_uint16_be s !pos in
    pos := !pos + 2;
    v
  in
  let u32 what =
    need 4 what;
    let v = Int32.to_int (String.get_int32_be s !pos) land u32_max in
    pos := !pos + 4;
    v
  in
  let cap what =
    match Cap.of_raw (take Cap.length what) with
    | Ok c -> c
    | Error e -> raise (Bad (Fmt.str "%s: %a" what Cap.pp_decode_error e))
  in
  try
    if len > max_size then
      raise (Bad (Printf.sprintf "the descriptor is larger than %d bytes" max_size));
    if take 3 "magic" <> magic then raise (Bad "not a process descriptor");
    let v = u8 "version" in
    if v <> version then
      raise (Bad (Printf.sprintf "process descriptor version %d (this server reads %d)" v version));
    let arch = take (u8 "arch") "arch" in
    let program = cap "program" in
    let cpu_ms = u32 "limits" in
    let memory_kib = u32 "limits" in
    let run_ms = u32 "limits" in
    let nargs = u16 "args" in
    if nargs > max_args then raise (Bad (Printf.sprintf "more than %d arguments" max_args));
    let args = List.init nargs (fun _ -> take (u16 "argument") "argument") in
    let ncaps = u8 "caps" in
    if ncaps > max_caps then raise (Bad (Printf.sprintf "more than %d named capabilities" max_caps));
    let caps =
      List.init ncaps (fun _ ->
          let n = take (u8 "name") "name" in
          (n, cap ("capability " ^ String.escaped n)))
    in
    let nh = u8 "hints" in
    if nh > max_hints then raise (Bad "too many locate hints");
    let hints = List.init nh (fun _ -> take (u8 "hint") "hint") in
    if !pos <> len then raise (Bad "trailing bytes after the descriptor");
    let t = { arch; program; args; caps; limits = { cpu_ms; memory_kib; run_ms }; hints } in
    match check t with Ok () -> Ok t | Error e -> Error e
  with Bad m -> Error m
