let registry =
  {
    Consort_sim.Scenario.area = "capdir";
    check_params = (fun _ -> Ok ());
    scenarios = Dir_sim.scenarios @ Gc_sim.scenarios;
  }
