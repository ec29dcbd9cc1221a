let () =
  Consort.Iovec.set_checked true;
  Alcotest.run "consort.net"
    [
      ("checksum", T_checksum.suite);
      ("wire", T_wire.suite);
      ("devices", T_devices.suite);
      ("stack", T_stack.suite);
      ("lru", T_lru.suite);
      ("ip-common", T_ip_common.suite);
      ("secret", T_secret.suite);
      ("flood", T_flood.suite);
      ("mix", T_mix.suite);
      ("ipv6", T_ipv6.suite);
      ("tap", T_tap.suite);
      ("tap6", T_tap6.suite);
      ("tap-flood", T_tap_flood.suite);
    ]
