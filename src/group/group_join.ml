open Consort
open Group_types

let header_reserve = 512
let has_layer name layers = List.exists (fun l -> Layer.name l = name) layers

(* Without Frag a message is one datagram, headers of every layer included. *)
let max_message_of params layers info_mtu =
  if has_layer Frag.name layers then Params.int params Frag.Param.max_message
  else max 0 (info_mtu - header_reserve)

type timing = { heal_interval : Time.t; install_retry : Time.t }

let timing params =
  {
    heal_interval = Params.time params Group_types.Param.heal_interval;
    install_retry = Params.time params Group_types.Param.install_retry;
  }

(* While a merge waits for an answer or a view waits for acknowledgements, come back sooner: that
   is what a join waits on. *)
let period t ~hurry =
  if hurry then min t.install_retry (Time.of_ms 10) else min t.heal_interval t.install_retry

let check ~parse ~params ~layers ~addr ~discovery ~peers =
  let parse what s =
    match parse s with
    | Ok a -> Ok a
    | Error reason -> Error (Bad_address { what; addr = s; reason })
  in
  let rec all acc = function
    | [] -> Ok (List.rev acc)
    | p :: rest -> ( match parse "peer" p with Ok a -> all (a :: acc) rest | Error e -> Error e)
  in
  let discovery =
    match discovery with None -> Ok None | Some d -> Result.map Option.some (parse "discovery" d)
  in
  match (parse "member" addr, discovery, all [] peers) with
  | Error e, _, _ | _, Error e, _ | _, _, Error e -> Error e
  | Ok local, Ok discovery, Ok peers -> (
      (* A group's stack must agree on views. *)
      match
        Result.bind (Stack.check ~requires:[ Gmp.membership ] layers) (fun () ->
            if has_layer Primary.name layers then Result.map Option.some (Primary.config params)
            else Ok None)
      with
      | Error e -> Error (Bad_stack e)
      | Ok primary_config -> Ok (local, discovery, peers, primary_config))

let xfer ?durable ~params ~layers ~max_message ~me ~take ~install cb =
  if has_layer Xfer.name layers then
    Some
      (Xfer.create ?durable ~params ~max_message ~me
         {
           Xfer.take;
           install;
           deliver =
             (fun kind ~origin s ->
               match kind with `Cast -> cb.cast ~origin s | `Send -> cb.send ~origin s);
         })
  else None

module Open (T : Transport.S) = struct
  module B = Bundle.Make (T)

  let conn ~size ~pool tr ~discovery addr handler =
    match B.open_with ~size ~pool tr addr handler with
    | Error e -> Error (`Cannot_open e)
    | Ok conn -> (
        match
          match discovery with Some d -> B.control conn (B.Join_multicast d) | None -> Ok ()
        with
        | Error e ->
            B.close conn;
            Error (`Cannot_join e)
        | Ok () -> Ok conn)
end
