type sample = {
  name : string;
  help : string;
  kind : [ `Counter | `Gauge ];
  labels : (string * string) list;
  value : float;
}

let valid_name s =
  String.mapi
    (fun i c ->
      match c with
      | 'a' .. 'z' | 'A' .. 'Z' | '_' | ':' -> c
      | '0' .. '9' when i > 0 -> c
      | _ -> '_')
    s

let escape v =
  let b = Buffer.create (String.length v) in
  String.iter
    (function
      | '\\' -> Buffer.add_string b "\\\\"
      | '"' -> Buffer.add_string b "\\\""
      | '\n' -> Buffer.add_string b "\\n"
      | c -> Buffer.add_char b c)
    v;
  Buffer.contents b

let escape_help v =
  let b = Buffer.create (String.length v) in
  String.iter
    (function
      | '\\' -> Buffer.add_string b "\\\\"
      | '\n' -> Buffer.add_string b "\\n"
      | c -> Buffer.add_char b c)
    v;
  Buffer.contents b

let value v =
  if Float.is_integer v && Float.abs v < 1e15 then Printf.sprintf "%.0f" v
  else if Float.is_nan v then "NaN"
  else if v = Float.infinity then "+Inf"
  else if v = Float.neg_infinity then "-Inf"
  else Printf.sprintf "%.17g" v

let render samples =
  let b = Buffer.create 4096 in
  let names =
    List.fold_left
      (fun acc s ->
        let n = valid_name s.name in
        if List.mem n acc then acc else n :: acc)
      [] samples
    |> List.rev
  in
  List.iter
    (fun n ->
      let mine = List.filter (fun s -> valid_name s.name = n) samples in
      let first = List.hd mine in
      Printf.bprintf b "# HELP %s %s\n# TYPE %s %s\n" n (escape_help first.help) n
        (match first.kind with `Counter -> "counter" | `Gauge -> "gauge");
      List.iter
        (fun s ->
          Buffer.add_string b n;
          if s.labels <> [] then (
            Buffer.add_char b '{';
            List.iteri
              (fun i (k, v) ->
                if i > 0 then Buffer.add_char b ',';
                Printf.bprintf b "%s=\"%s\"" (valid_name k) (escape v))
              s.labels;
            Buffer.add_char b '}');
          Printf.bprintf b " %s\n" (value s.value))
        mine)
    names;
  Buffer.contents b

(* What a layer reports that is a level now, not a count of events: a
   window, a queue, a round under way. *)
let gauges =
  [
    "blocked";
    "buffered";
    "clients";
    "credit_held";
    "done_sent";
    "dones";
    "flushed";
    "held";
    "held_bytes";
    "held_peak";
    "holding";
    "members";
    "oks";
    "on";
    "outstanding";
    "queued";
    "queued_messages";
    "reassembling";
    "round";
    "round_coord";
    "slanders_pending";
    "suspected";
    "target";
    "unacked";
    "waiting";
    "waiting_token";
    "watched";
  ]

let is_gauge name = List.mem name gauges

(* By (layer, counter): what earlier stacks counted, and the last value seen. *)
type totals = (string * string, int * int) Hashtbl.t

let totals () : totals = Hashtbl.create 64

let observe (tt : totals) counters =
  List.iter
    (fun (layer, l) ->
      List.iter
        (fun (c, n) ->
          if not (is_gauge c) then
            match Hashtbl.find_opt tt (layer, c) with
            | None -> Hashtbl.replace tt (layer, c) (0, n)
            | Some (base, last) ->
                (* Lower than last seen: a new stack counts from 0. *)
                Hashtbl.replace tt (layer, c) ((if n < last then base + last else base), n))
        l)
    counters

let total (tt : totals) layer c =
  match Hashtbl.find_opt tt (layer, c) with Some (base, last) -> base + last | None -> 0

let of_counters ~totals:tt ~labels counters =
  observe tt counters;
  List.concat_map
    (fun (layer, l) ->
      List.map
        (fun (c, n) ->
          if is_gauge c then
            {
              name = "consort_layer_gauge";
              help = "A level of one layer of the member's stack now (a queue, a window, a round).";
              kind = `Gauge;
              labels = labels @ [ ("layer", layer); ("gauge", c) ];
              value = float_of_int n;
            }
          else
            {
              name = "consort_layer_events_total";
              help =
                "Events counted by one layer of the member's stack, for the life of the process \
                 (across view changes).";
              kind = `Counter;
              labels = labels @ [ ("layer", layer); ("counter", c) ];
              value = float_of_int (total tt layer c);
            })
        l)
    counters

let member_labels ~group id =
  let addr = match String.index_opt id '#' with Some i -> String.sub id 0 i | None -> id in
  [ ("group", group); ("member", addr) ]

let member_info ~group id =
  {
    name = "consort_member_info";
    help = "1 for the member's incarnation (its id: address and incarnation).";
    kind = `Gauge;
    labels = member_labels ~group id @ [ ("id", id) ];
    value = 1.;
  }

let response code reason body =
  Printf.sprintf
    "HTTP/1.1 %d %s\r\n\
     Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
     Content-Length: %d\r\n\
     Connection: close\r\n\
     \r\n\
     %s"
    code reason (String.length body) body

let serve ?max_connections loop addr samples =
  Serve.listen ?max_connections ~max_request:8192 ~idle:10. loop addr Http (fun req ->
      let line =
        match String.index_opt req '\r' with Some i -> String.sub req 0 i | None -> req
      in
      match String.split_on_char ' ' line with
      | [ "GET"; path; _ ] | [ "GET"; path ] -> (
          let path =
            match String.index_opt path '?' with Some i -> String.sub path 0 i | None -> path
          in
          match path with
          | "/metrics" -> response 200 "OK" (render (samples ()))
          | "/" -> response 200 "OK" "Consort: the metrics are at /metrics\n"
          | _ -> response 404 "Not Found" "not found: the metrics are at /metrics\n")
      | m :: _ :: _ when m <> "" -> response 405 "Method Not Allowed" "only GET\n"
      | _ -> response 400 "Bad Request" "bad request\n")
