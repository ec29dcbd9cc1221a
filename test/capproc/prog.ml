(* A program for the process server's tests: what it does is its first
   argument. *)
let () =
  match Array.to_list Sys.argv with
  | _ :: "echo" :: code :: rest ->
      (* Its arguments, its capability environment, its input in capitals,
         a line on stderr, and the exit code asked for. *)
      Printf.printf "args: %s\n" (String.concat " " rest);
      Printf.printf "caps: %s\n" (String.concat "," (Consort_capenv.names ()));
      List.iter
        (fun n ->
          if not (List.mem n [ "stdin"; "stdout"; "stderr" ]) then
            Printf.printf "%s: %s\n" n (Option.value ~default:"-" (Consort_capenv.find n)))
        (Consort_capenv.names ());
      Printf.printf "self: %b\n" (Consort_capenv.self () <> None);
      (try
         while true do
           print_endline (String.uppercase_ascii (input_line stdin))
         done
       with End_of_file -> ());
      prerr_endline "bye";
      exit (int_of_string code)
  | _ :: "big" :: n :: _ ->
      (* n lines of output: more than the circuit's buffer holds. *)
      for i = 1 to int_of_string n do
        Printf.printf "line %d %s\n" i (String.make 50 'x')
      done;
      exit 0
  | _ :: "spin" :: _ ->
      let x = ref 0 in
      while true do
        incr x
      done
  | _ :: "hog" :: _ ->
      let l = ref [] in
      while true do
        l := Bytes.make 1_048_576 'x' :: !l
      done
  | _ :: "sleep" :: _ -> Unix.sleepf 3600. |> ignore
  | _ :: "sleepint" :: _ ->
      (* Like intr, but with no input: sleeps until SIGINT. *)
      Sys.set_signal Sys.sigint
        (Sys.Signal_handle
           (fun _ ->
             print_endline "interrupted";
             exit 42));
      print_endline "waiting";
      for _ = 1 to 3600 do
        Unix.sleepf 1.
      done;
      exit 1
  | _ :: "intr" :: _ ->
      (* Waits for SIGINT (the caller's interrupt), then exits 42. *)
      Sys.set_signal Sys.sigint
        (Sys.Signal_handle
           (fun _ ->
             print_endline "interrupted";
             exit 42));
      print_endline "waiting";
      let rec wait n =
        if n > 0 then (
          ignore (Sys.opaque_identity (input_line stdin));
          wait (n - 1))
      in
      (try wait 1000 with End_of_file -> ());
      exit 1
  | _ ->
      prerr_endline "prog: unknown mode";
      exit 64
