type restart = Always | On_failure | Never
type piece = Text of string | Service of string
type word = piece list

type service = {
  name : string;
  run : word list;
  after : string list;
  caps : (string * word) list;
  env : (string * string) list;
  capability : bool;
  restart : restart;
  backoff : float * float;
  poll : float;
  start_timeout : float;
  at : string list;
  line : int;
}

let max_services = 64
let max_args = 256
let max_line = 4096
let max_file = 256 * 1024

exception Bad of int * string

let valid_name s =
  let n = String.length s in
  n >= 1 && n <= 32
  && String.for_all (function 'a' .. 'z' | '0' .. '9' | '_' | '-' -> true | _ -> false) s

(* Words of a line: separated by spaces and tabs; double quotes make one word (a backslash escapes the next character). *)
let split ln s =
  let n = String.length s in
  let words = ref [] and cur = Buffer.create 16 and in_word = ref false in
  let flush () =
    if !in_word then words := Buffer.contents cur :: !words;
    Buffer.clear cur;
    in_word := false
  in
  let i = ref 0 in
  while !i < n do
    (match s.[!i] with
    | ' ' | '\t' -> flush ()
    | '"' ->
        in_word := true;
        incr i;
        let closed = ref false in
        while (not !closed) && !i < n do
          (match s.[!i] with
          | '"' -> closed := true
          | '\\' when !i + 1 < n ->
              incr i;
              Buffer.add_char cur s.[!i]
          | c -> Buffer.add_char cur c);
          if not !closed then incr i
        done;
        if not !closed then raise (Bad (ln, "unterminated quote"))
    | c ->
        in_word := true;
        Buffer.add_char cur c);
    incr i
  done;
  flush ();
  List.rev !words

(* $NAME references in a word. *)
let word ln s =
  let n = String.length s in
  let pieces = ref [] and text = Buffer.create 16 in
  let i = ref 0 in
  while !i < n do
    if s.[!i] = '$' then begin
      if !i + 1 < n && s.[!i + 1] = '$' then (
        Buffer.add_char text '$';
        i := !i + 2)
      else begin
        let j = ref (!i + 1) in
        while
          !j < n && match s.[!j] with 'a' .. 'z' | '0' .. '9' | '_' | '-' -> true | _ -> false
        do
          incr j
        done;
        let name = String.sub s (!i + 1) (!j - !i - 1) in
        if not (valid_name name) then
          raise (Bad (ln, Printf.sprintf "bad service reference in %S (write $$ for a $)" s));
        if Buffer.length text > 0 then (
          pieces := Text (Buffer.contents text) :: !pieces;
          Buffer.clear text);
        pieces := Service name :: !pieces;
        i := !j
      end
    end
    else (
      Buffer.add_char text s.[!i];
      incr i)
  done;
  if Buffer.length text > 0 || !pieces = [] then pieces := Text (Buffer.contents text) :: !pieces;
  List.rev !pieces

let refs w = List.filter_map (function Service s -> Some s | Text _ -> None) w

let expand cap_of w =
  List.fold_left
    (fun acc p ->
      match acc with
      | Error _ -> acc
      | Ok s -> (
          match p with
          | Text t -> Ok (s ^ t)
          | Service n -> (
              match cap_of n with
              | Some c -> Ok (s ^ c)
              | None -> Error (Printf.sprintf "service %s has no capability" n))))
    (Ok "") w

let float_of ln what s =
  match float_of_string_opt s with
  | Some f when Float.is_finite f && f > 0. && f <= 86400. -> f
  | _ -> raise (Bad (ln, Printf.sprintf "%s: %S is not a number of seconds in (0, 86400]" what s))

let key_value ln what s =
  match String.index_opt s '=' with
  | Some i when i > 0 -> (String.sub s 0 i, String.sub s (i + 1) (String.length s - i - 1))
  | _ -> raise (Bad (ln, Printf.sprintf "%s: expected NAME=VALUE, got %S" what s))

let blank name line =
  {
    name;
    run = [];
    after = [];
    caps = [];
    env = [];
    capability = true;
    restart = Always;
    backoff = (0.5, 30.);
    poll = 2.;
    start_timeout = 10.;
    at = [];
    line;
  }

(* Dependency order; a cycle is an error naming it. *)
let order services =
  let by_name = Hashtbl.create 16 in
  List.iter (fun s -> Hashtbl.replace by_name s.name s) services;
  let state = Hashtbl.create 16 and out = ref [] in
  let rec visit path s =
    match Hashtbl.find_opt state s.name with
    | Some `Done -> ()
    | Some `Visiting ->
        let rec cycle = function
          | [] -> []
          | x :: rest -> if x = s.name then [ x ] else x :: cycle rest
        in
        let c = List.rev (cycle path) in
        raise (Bad (s.line, "cyclic dependencies: " ^ String.concat " -> " (c @ [ s.name ])))
    | None ->
        Hashtbl.replace state s.name `Visiting;
        List.iter (fun d -> visit (s.name :: path) (Hashtbl.find by_name d)) s.after;
        Hashtbl.replace state s.name `Done;
        out := s :: !out
  in
  List.iter (visit []) services;
  List.rev !out

let parse ?(file = "declarations") text =
  try
    if String.length text > max_file then
      raise (Bad (0, Printf.sprintf "larger than %d bytes" max_file));
    let services = ref [] and cur = ref None in
    let close () =
      match !cur with
      | Some s ->
          services := s :: !services;
          cur := None
      | None -> ()
    in
    List.iteri
      (fun i raw ->
        let ln = i + 1 in
        if String.length raw > max_line then raise (Bad (ln, "line too long"));
        let l = String.trim raw in
        if l = "" || l.[0] = '#' then ()
        else
          match split ln l with
          | [] -> ()
          | [ "service"; name ] ->
              if not (valid_name name) then
                raise (Bad (ln, Printf.sprintf "bad service name %S (1-32 of a-z 0-9 _ -)" name));
              if
                List.exists (fun s -> s.name = name) !services
                || Option.fold ~none:false ~some:(fun s -> s.name = name) !cur
              then raise (Bad (ln, Printf.sprintf "service %s declared twice" name));
              close ();
              if List.length !services >= max_services then
                raise (Bad (ln, Printf.sprintf "more than %d services" max_services));
              cur := Some (blank name ln)
          | "service" :: _ -> raise (Bad (ln, "expected: service NAME"))
          | kw :: args -> (
              let s =
                match !cur with
                | Some s -> s
                | None -> raise (Bad (ln, Printf.sprintf "%S before any service line" kw))
              in
              let set s' = cur := Some s' in
              match (kw, args) with
              | "run", (_ :: _ as ws) ->
                  if s.run <> [] then raise (Bad (ln, "a second run line"));
                  if List.length ws > max_args then raise (Bad (ln, "too many arguments"));
                  set { s with run = List.map (word ln) ws }
              | "after", (_ :: _ as ns) ->
                  List.iter
                    (fun n ->
                      if not (valid_name n) then
                        raise (Bad (ln, Printf.sprintf "bad service name %S" n)))
                    ns;
                  set { s with after = s.after @ ns }
              | "cap", [ kv ] ->
                  let k, v = key_value ln "cap" kv in
                  if not (Consort_capproc.Pd.valid_name k) then
                    raise (Bad (ln, Printf.sprintf "bad capability name %S" k));
                  set { s with caps = s.caps @ [ (k, word ln v) ] }
              | "env", [ kv ] ->
                  let k, v = key_value ln "env" kv in
                  set { s with env = s.env @ [ (k, v) ] }
              | "capability", [ "stdout" ] -> set { s with capability = true }
              | "capability", [ "none" ] -> set { s with capability = false }
              | "restart", [ "always" ] -> set { s with restart = Always }
              | "restart", [ "on-failure" ] -> set { s with restart = On_failure }
              | "restart", [ "never" ] -> set { s with restart = Never }
              | "backoff", [ a; b ] ->
                  let a = float_of ln "backoff" a and b = float_of ln "backoff" b in
                  if a > b then raise (Bad (ln, "backoff: MIN is above MAX"));
                  set { s with backoff = (a, b) }
              | "at", (_ :: _ as l) ->
                  List.iter
                    (fun a ->
                      if Result.is_error (Consort_engine.Udp.address_of_string a) then
                        raise (Bad (ln, Printf.sprintf "at: bad address %S" a)))
                    l;
                  set { s with at = s.at @ l }
              | "poll", [ p ] -> set { s with poll = float_of ln "poll" p }
              | "start-timeout", [ p ] ->
                  set { s with start_timeout = float_of ln "start-timeout" p }
              | ( ( "run" | "after" | "at" | "cap" | "env" | "capability" | "restart" | "backoff"
                  | "poll" | "start-timeout" ),
                  _ ) ->
                  raise (Bad (ln, Printf.sprintf "%s: wrong arguments" kw))
              | _ -> raise (Bad (ln, Printf.sprintf "unknown keyword %S" kw))))
      (String.split_on_char '\n' text);
    close ();
    let services = List.rev !services in
    if services = [] then raise (Bad (0, "no service declared"));
    let names = List.map (fun s -> s.name) services in
    let services =
      List.map
        (fun s ->
          if s.run = [] then
            raise (Bad (s.line, Printf.sprintf "service %s has no run line" s.name));
          let implied =
            List.concat_map refs s.run @ List.concat_map (fun (_, w) -> refs w) s.caps
          in
          let after = List.sort_uniq compare (s.after @ implied) in
          List.iter
            (fun d ->
              if not (List.mem d names) then
                raise
                  (Bad
                     ( s.line,
                       Printf.sprintf "service %s depends on %s, which is not declared" s.name d )))
            after;
          { s with after })
        services
    in
    List.iter
      (fun s ->
        List.iter
          (fun d ->
            match List.find_opt (fun x -> x.name = d) services with
            | Some x
              when (not x.capability)
                   && List.mem d
                        (List.concat_map refs s.run @ List.concat_map (fun (_, w) -> refs w) s.caps)
              ->
                raise
                  (Bad
                     ( s.line,
                       Printf.sprintf
                         "service %s uses $%s, which has no capability (capability none)" s.name d
                     ))
            | _ -> ())
          s.after)
      services;
    Ok (order services)
  with Bad (ln, m) ->
    Error (if ln = 0 then Printf.sprintf "%s: %s" file m else Printf.sprintf "%s:%d: %s" file ln m)

let load file =
  match open_in_bin file with
  | exception Sys_error e -> Error e
  | ic ->
      let r =
        try
          let n = in_channel_length ic in
          if n > max_file then Error (Printf.sprintf "%s: larger than %d bytes" file max_file)
          else parse ~file (really_input_string ic n)
        with Sys_error e -> Error e
      in
      close_in_noerr ic;
      r
