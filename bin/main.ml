let () = print_endline "consort"
