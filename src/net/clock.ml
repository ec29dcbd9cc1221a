type cancel = unit -> unit
type t = { now : unit -> Consort.Time.t; at : Consort.Time.t -> (unit -> unit) -> cancel }

module Virtual = struct
  type entry = { time : Consort.Time.t; seq : int; f : unit -> unit; mutable live : bool }
  type clock = { mutable now : Consort.Time.t; mutable seq : int; mutable q : entry list }

  let create () = { now = 0; seq = 0; q = [] }

  let insert c e =
    let rec go = function
      | [] -> [ e ]
      | x :: rest as l -> if (e.time, e.seq) < (x.time, x.seq) then e :: l else x :: go rest
    in
    c.q <- go c.q

  let clock c =
    {
      now = (fun () -> c.now);
      at =
        (fun time f ->
          c.seq <- c.seq + 1;
          let e = { time; seq = c.seq; f; live = true } in
          insert c e;
          fun () -> e.live <- false);
    }

  let rec next c =
    match c.q with
    | e :: rest when not e.live ->
        c.q <- rest;
        next c
    | e :: _ -> Some e.time
    | [] -> None

  let rec run_due c =
    match c.q with
    | e :: rest when e.time <= c.now ->
        c.q <- rest;
        if e.live then e.f ();
        run_due c
    | _ -> ()

  let advance c d =
    let target = c.now + d in
    let rec go () =
      match next c with
      | Some t when t <= target ->
          c.now <- max c.now t;
          run_due c;
          go ()
      | _ -> c.now <- target
    in
    go ()

  let run_until_idle ?(limit = max_int) c =
    let rec go () =
      match next c with
      | Some t when t <= limit ->
          c.now <- max c.now t;
          run_due c;
          go ()
      | _ -> ()
    in
    go ()
end
