(* Command-line wrapper of Consort_member.Mcast_peer for the
   three-process test.

   Usage: mcast_peer RANK ADDR0 ADDR1 ADDR2 COUNTS LOSS SEED [DEADLINE_S]

   COUNTS is how many messages each rank casts: one number for all, or one
   per rank separated by commas ("3334,3333,3333"). Exits 0 only if
   delivery was complete and correct. *)

let usage () =
  prerr_endline "usage: mcast_peer RANK ADDR0 ADDR1 ADDR2 COUNTS LOSS SEED [DEADLINE_S]";
  exit 2

let int_arg s = match int_of_string_opt s with Some n -> n | None -> usage ()
let float_arg s = match float_of_string_opt s with Some x -> x | None -> usage ()

let () =
  let args = Array.sub Sys.argv 1 (Array.length Sys.argv - 1) in
  if Array.length args < 7 || Array.length args > 8 then usage ();
  let rank = int_arg args.(0) in
  let members = [| args.(1); args.(2); args.(3) |] in
  let n = Array.length members in
  let counts =
    match String.split_on_char ',' args.(4) with
    | [ c ] -> Array.make n (int_arg c)
    | cs when List.length cs = n -> Array.of_list (List.map int_arg cs)
    | _ -> usage ()
  in
  let loss = float_arg args.(5) in
  let seed = int_arg args.(6) in
  let deadline = if Array.length args = 8 then float_arg args.(7) else 60. in
  if rank < 0 || rank >= n || loss < 0. || loss >= 1. then usage ();
  Logs.set_reporter (Logs.format_reporter ~dst:Format.err_formatter ());
  Logs.set_level (Some Logs.Warning);
  Consort.Iovec.set_checked true;
  match Consort_member.Mcast_peer.run ~rank ~members ~counts ~loss ~seed ~deadline with
  | Ok ok -> exit (if ok then 0 else 1)
  | Error e ->
      Printf.printf "peer %d: %s\n%!" rank (Fmt.str "%a" Consort_member.Mcast_peer.pp_error e);
      exit 1
