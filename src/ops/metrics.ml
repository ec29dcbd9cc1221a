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

let of_counters ~labels counters =
  List.concat_map
    (fun (layer, l) ->
      List.map
        (fun (counter, n) ->
          {
            name = "consort_layer_counter";
            help =
              "A counter of one layer of the member's stack (layers above Bottom restart at each \
               view).";
            kind = `Counter;
            labels = labels @ [ ("layer", layer); ("counter", counter) ];
            value = float_of_int n;
          })
        l)
    counters

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
