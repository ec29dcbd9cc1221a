let registry =
  {
    Consort_sim.Scenario.area = "kv";
    check_params = (fun _ -> Ok ());
    scenarios = Kv_sim.scenarios;
  }
