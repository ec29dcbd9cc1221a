module Loop = Consort_engine.Loop

let of_loop l =
  {
    Consort_net.Clock.now = (fun () -> Loop.now l);
    at =
      (fun time f ->
        let tm = Loop.at l time f in
        fun () -> Loop.cancel tm);
  }
