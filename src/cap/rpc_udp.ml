module Udp = Consort_engine.Udp
include Rpc.Make (Udp)

module Sync = Blocking (struct
  let run_until loop f = if not (f ()) then Consort_engine.Loop.run ~until:f loop
end)

external c_keep_memory : int -> int -> bool = "consort_cap_keep_memory"

let kept = ref false

let keep_memory () =
  if not !kept then begin
    kept := true;
    ignore (c_keep_memory (4 * 1024 * 1024) (64 * 1024 * 1024));
    Gc.set { (Gc.get ()) with max_overhead = 1_000_000 }
  end

let default_multicast = "239.255.67.79:7469"

let parse_list what l =
  List.fold_left
    (fun acc s ->
      match acc with
      | Error _ -> acc
      | Ok l -> (
          match Udp.address_of_string s with
          | Ok a -> Ok (a :: l)
          | Error e -> Error (Printf.sprintf "%s: %s" what e)))
    (Ok []) l
  |> Result.map List.rev

let multicast_of_env () =
  match Sys.getenv_opt "CONSORT_MULTICAST" with
  | None -> Some default_multicast
  | Some v -> (
      match String.lowercase_ascii (String.trim v) with
      | "" | "off" | "none" -> None
      | _ -> Some (String.trim v))

let open_node ?config ?g ?locate ?multicast ?(bind = "0.0.0.0:0") loop =
  let multicast = match multicast with Some m -> m | None -> multicast_of_env () in
  match (Udp.address_of_string bind, parse_list "--locate" (Rpc.locate_list ?arg:locate ())) with
  | Error e, _ -> Error ("--bind: " ^ e)
  | _, Error e -> Error e
  | Ok addr, Ok locate -> (
      let group =
        match multicast with
        | None -> Ok None
        | Some m -> Result.map Option.some (Udp.address_of_string m)
      in
      match group with
      | Error e -> Error ("multicast group (CONSORT_MULTICAST): " ^ e)
      | Ok multicast -> (
          match create ?config ?g ~locate ?multicast loop addr with
          | Ok n -> Ok n
          | Error _ when multicast <> None ->
              Logs.info (fun m ->
                  m "multicast unavailable; locating by the configured addresses only");
              create ?config ?g ~locate loop addr
          | Error e -> Error e))
