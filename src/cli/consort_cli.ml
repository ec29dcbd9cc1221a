open Cmdliner

let ok = 0
let checks_failed = 1
let refused = 2
let unknown = 3

let exits =
  [
    Cmd.Exit.info ok ~doc:"done (for checkers and simulations: every check passed).";
    Cmd.Exit.info checks_failed ~doc:"the command ran and what it checked failed (a violation, a failing seed).";
    Cmd.Exit.info refused
      ~doc:"refused: a bad value, file, address, key or capability; nothing was done. One line on standard error says why.";
    Cmd.Exit.info unknown ~doc:"outcome unknown: a peer was lost while a request was under way.";
    Cmd.Exit.info Cmd.Exit.cli_error ~doc:"the command line could not be read (unknown option, missing argument, bad value).";
    Cmd.Exit.info Cmd.Exit.internal_error ~doc:"internal error: a defect in Consort, never an expected outcome.";
  ]

let bounded_int ~what ~min =
  let parse s =
    match int_of_string_opt (String.trim s) with
    | Some n when n >= min -> Ok n
    | Some _ -> Error (`Msg (Printf.sprintf "%S: expected %s" s what))
    | None -> Error (`Msg (Printf.sprintf "%S: not an integer" s))
  in
  Arg.conv ~docv:"N" (parse, Format.pp_print_int)

let positive_int = bounded_int ~what:"an integer of at least 1" ~min:1
let natural = bounded_int ~what:"an integer of at least 0" ~min:0

let bounded_float ~what ok =
  let parse s =
    match float_of_string_opt (String.trim s) with
    | Some x when Float.is_finite x && ok x -> Ok x
    | Some _ -> Error (`Msg (Printf.sprintf "%S: expected %s" s what))
    | None -> Error (`Msg (Printf.sprintf "%S: not a number" s))
  in
  Arg.conv ~docv:"X" (parse, fun ppf x -> Format.fprintf ppf "%g" x)

let positive_float = bounded_float ~what:"a number greater than 0" (fun x -> x > 0.)
let fraction = bounded_float ~what:"a number from 0 to 1" (fun x -> x >= 0. && x <= 1.)

let one_line s =
  let b = Buffer.create (String.length s) in
  let space = ref false in
  String.iter
    (fun c ->
      match c with
      | ' ' | '\t' | '\n' | '\r' -> space := Buffer.length b > 0
      | c ->
          if !space then Buffer.add_char b ' ';
          space := false;
          Buffer.add_char b c)
    s;
  Buffer.contents b

let fail cmd fmt =
  Format.kasprintf
    (fun msg ->
      Printf.eprintf "consort %s: %s\n%!" cmd (one_line msg);
      refused)
    fmt

let main cmd =
  let code =
    match Cmd.eval' ~catch:false cmd with
    | code -> code
    | exception Stack_overflow ->
        prerr_endline "consort: internal error: stack overflow";
        Cmd.Exit.internal_error
    | exception Out_of_memory ->
        prerr_endline "consort: internal error: out of memory";
        Cmd.Exit.internal_error
    | exception e ->
        Printf.eprintf "consort: internal error: %s\n%!" (one_line (Printexc.to_string e));
        Cmd.Exit.internal_error
  in
  exit code
