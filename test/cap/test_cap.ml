let () =
  if Array.length Sys.argv > 1 && Sys.argv.(1) = "--multicast-child" then Test_mcast.child ()
  else
    Alcotest.run "consort-cap"
      [
        ("caps", Test_caps.tests);
        ("gcm", Test_gcm.tests);
        ("rpc", Test_rpc.tests);
        ("udp", Test_udp.tests);
        ("stack", Test_stack.tests);
        ("multicast", Test_mcast.tests);
      ]
