type change = { member : string; what : string }

type entry = {
  t : float;
  vid : string;
  ltime : int;
  members : string list;
  coordinator : string;
  changes : change list;
}

type history = { max : int; q : entry Queue.t }

let default_max = 64
let history ?(max = default_max) () = { max = Stdlib.max 1 max; q = Queue.create () }
let max h = h.max

let changes ~joined ~left ~why =
  let merged = List.length joined >= 2 in
  List.map (fun m -> { member = m; what = (if merged then "merged" else "joined") }) joined
  @ List.map
      (fun m ->
        { member = m; what = (match List.assoc_opt m why with Some w -> w | None -> "left") })
      left

let record h e =
  Queue.push e h.q;
  while Queue.length h.q > h.max do
    ignore (Queue.pop h.q)
  done

let entries h = List.of_seq (Queue.to_seq h.q)

let entry_json e : Yojson.Safe.t =
  `Assoc
    [
      ("t", `Float e.t);
      ("view", `String e.vid);
      ("ltime", `Int e.ltime);
      ("coordinator", `String e.coordinator);
      ("members", `List (List.map (fun m -> `String m) e.members));
      ( "changes",
        `List
          (List.map
             (fun c -> `Assoc [ ("member", `String c.member); ("what", `String c.what) ])
             e.changes) );
    ]

let history_json h = `List (List.map entry_json (entries h))
let page = Console_page.html

let check_address ~flag ~public addr =
  let host = match String.rindex_opt addr ':' with Some i -> String.sub addr 0 i | None -> addr in
  let host =
    if String.length host >= 2 && host.[0] = '[' then String.sub host 1 (String.length host - 2)
    else host
  in
  let loopback =
    host = "localhost" || host = "::1" || (String.length host >= 4 && String.sub host 0 4 = "127.")
  in
  if loopback || public then Ok ()
  else
    Error
      (Printf.sprintf
         "%s %s: the console names the groups and their members (what Privacy hides on the wire): \
          on an address other than loopback, add %s-public"
         flag addr flag)

let response code reason ctype body =
  Printf.sprintf
    "HTTP/1.1 %d %s\r\n\
     Content-Type: %s\r\n\
     Content-Length: %d\r\n\
     Cache-Control: no-store\r\n\
     X-Content-Type-Options: nosniff\r\n\
     Connection: close\r\n\
     \r\n\
     %s"
    code reason ctype (String.length body) body

let text = "text/plain; charset=utf-8"

let answer ~node groups req =
  let line = match String.index_opt req '\r' with Some i -> String.sub req 0 i | None -> req in
  match String.split_on_char ' ' line with
  | [ "GET"; path; _ ] | [ "GET"; path ] -> (
      let path =
        match String.index_opt path '?' with Some i -> String.sub path 0 i | None -> path
      in
      match path with
      | "/" | "/index.html" -> response 200 "OK" "text/html; charset=utf-8" page
      | "/api/status" ->
          let body =
            `Assoc
              [
                ("node", `String node);
                ("pid", `Int (Unix.getpid ()));
                ("time", `Float (Unix.gettimeofday ()));
                ("groups", `List (groups ()));
              ]
          in
          response 200 "OK" "application/json" (Yojson.Safe.to_string body ^ "\n")
      | _ ->
          response 404 "Not Found" text
            "not found: the console is at / and its data at /api/status\n")
  | m :: _ :: _ when m <> "" -> response 405 "Method Not Allowed" text "read-only: only GET\n"
  | _ -> response 400 "Bad Request" text "bad request\n"

let serve ?(max_connections = 16) ?(idle = 10.) loop addr ~node groups =
  Serve.listen ~max_connections ~max_request:8192 ~idle loop addr Http (answer ~node groups)

type rates = { span : int; samples : (float * int * int) Queue.t }

let rates ?(span = 60) () = { span = Stdlib.max 2 span; samples = Queue.create () }

let sample r ~t ~sent ~delivered =
  Queue.push (t, sent, delivered) r.samples;
  while Queue.length r.samples > r.span + 1 do
    ignore (Queue.pop r.samples)
  done

let rates_json r =
  let rec go acc = function
    | (t0, s0, d0) :: ((t1, s1, d1) :: _ as rest) when t1 > t0 ->
        let per v0 v1 = `Float (float_of_int (Stdlib.max 0 (v1 - v0)) /. (t1 -. t0)) in
        go (`Assoc [ ("t", `Float t1); ("sent", per s0 s1); ("delivered", per d0 d1) ] :: acc) rest
    | _ :: rest -> go acc rest
    | [] -> List.rev acc
  in
  `List (go [] (List.of_seq (Queue.to_seq r.samples)))

let group_json ~status ~counters ~quorum ~coordinator ~sequencer ~token_holder h r : Yojson.Safe.t =
  let id = function Some x -> `String x | None -> `Null in
  `Assoc
    (status
    @ [
        ("counters", Control.counters_json counters);
        ("quorum", quorum);
        ( "roles",
          `Assoc
            [
              ("coordinator", `String coordinator);
              ("sequencer", id sequencer);
              ("token_holder", id token_holder);
            ] );
        ("history", history_json h);
        ("history_max", `Int (max h));
        ("rates", rates_json r);
      ])
