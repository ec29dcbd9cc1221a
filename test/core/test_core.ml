let () =
  Consort.Iovec.set_checked true;
  Alcotest.run "consort-core"
    [
      ("buffers", Test_buffers.tests);
      ("codec", Test_codec.tests);
      ("msg", Test_msg.tests);
      ("stack", Test_stack.tests);
      ("misc", Test_misc.tests);
      ("deadlines", Test_deadlines.tests);
    ]
