let () =
  Alcotest.run "consort-cap" [ ("caps", Test_caps.tests); ("rpc", Test_rpc.tests); ("udp", Test_udp.tests) ]
