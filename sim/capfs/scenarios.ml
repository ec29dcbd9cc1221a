let registry =
  {
    Consort_sim.Scenario.area = "capfs";
    check_params = (fun _ -> Ok ());
    scenarios = Fs_sim.scenarios;
  }
