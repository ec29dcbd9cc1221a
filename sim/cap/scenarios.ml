let registry =
  {
    Consort_sim.Scenario.area = "cap";
    check_params = (fun _ -> Ok ());
    scenarios = Rpc_sim.scenarios;
  }
