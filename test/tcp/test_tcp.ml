let () =
  Consort.Iovec.set_checked true;
  Logs.set_reporter (Logs_fmt.reporter ());
  (match Sys.getenv_opt "TCP_DEBUG" with Some _ -> Logs.set_level (Some Logs.Debug) | None -> ());
  Alcotest.run "consort-tcp"
    [
      ("units", Test_units.tests);
      ("decisions", Test_decisions.tests);
      ("bbr", Test_bbr.tests);
      ("harden", Test_harden.tests);
      ("script", Test_scripts.tests);
      ("transfer", Test_transfer.tests);
      ("socket", Test_socket.tests);
      ("hostile", Test_fuzz.tests);
      ("stacks", Test_stacks.tests);
      ("rack", Test_rack.tests);
      ("pmtu", Test_pmtu.tests);
      ("recovery", Test_recovery.tests);
    ]
