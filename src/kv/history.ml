module L = Consort_spec.Linearizable

let line ~client ~call ~return op resp =
  let o =
    match op with
    | Op.Get k -> [ "get"; k ]
    | Put (k, v) -> [ "put"; k; v ]
    | Del k -> [ "del"; k ]
    | Cas { key; expect; set } -> [ "cas"; key; expect; set ]
  in
  let r, ret =
    match (resp, return) with
    | Some (Op.Value v), Some t -> ([ "value"; v ], t)
    | Some Op.Ok, Some t -> ([ "ok" ], t)
    | Some Op.Not_found, Some t -> ([ "not-found" ], t)
    | Some Op.Cas_failed, Some t -> ([ "cas-failed" ], t)
    | _ -> ([ "?" ], -1)
  in
  String.concat "\t"
    ([ string_of_int client; string_of_int call; string_of_int ret ] @ o @ [ "=>" ] @ r)

let parse l =
  match String.split_on_char '\t' l with
  | c :: call :: ret :: rest -> (
      let rec split acc = function
        | "=>" :: r -> Some (List.rev acc, r)
        | x :: r -> split (x :: acc) r
        | [] -> None
      in
      match (int_of_string_opt c, int_of_string_opt call, int_of_string_opt ret, split [] rest) with
      | Some client, Some call, Some ret, Some (opw, rw) -> (
          match Op.parse opw with
          | Error e -> Error e
          | Ok op -> (
              let response =
                match rw with
                | [ "value"; v ] -> Ok (Some (L.Value v))
                | [ "ok" ] -> Ok (Some L.Ok)
                | [ "not-found" ] -> Ok (Some L.Not_found)
                | [ "cas-failed" ] -> Ok (Some L.Cas_failed)
                | [ "?" ] -> Ok None
                | _ -> Error "unknown response"
              in
              match response with
              | Error e -> Error e
              | Ok response ->
                  if response = None <> (ret < 0) then
                    Error "a response needs a return time, an unknown outcome -1"
                  else
                    Ok
                      {
                        L.client;
                        key = Op.key op;
                        op = Op.to_spec op;
                        call;
                        return = (if ret < 0 then None else Some ret);
                        response;
                      }))
      | _ ->
          Error
            "expected CLIENT, CALL, RETURN, the operation, => and the response, separated by tabs")
  | _ ->
      Error "expected CLIENT, CALL, RETURN, the operation, => and the response, separated by tabs"

let read file =
  match open_in file with
  | exception Sys_error e -> Error e
  | ic ->
      let rec go n acc =
        match input_line ic with
        | exception End_of_file -> Ok (List.rev acc)
        | l when String.trim l = "" || l.[0] = '#' -> go (n + 1) acc
        | l -> (
            match parse l with
            | Ok e -> go (n + 1) (e :: acc)
            | Error e -> Error (Printf.sprintf "%s:%d: %s" file n e))
      in
      let r = go 1 [] in
      close_in ic;
      r
