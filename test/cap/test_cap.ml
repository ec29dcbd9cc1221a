let () = Alcotest.run "consort-cap" [ ("caps", Test_caps.tests) ]
