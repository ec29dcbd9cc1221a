type cancel = unit -> unit
type t = { now : unit -> Consort.Time.t; at : Consort.Time.t -> (unit -> unit) -> cancel }

module Virtual = struct
  type entry = { time : Consort.Time.t; seq : int; f : unit -> unit; mutable live : bool }

  (* A binary min-heap on (time, seq): timers due at the same time run in
     the order they were set. *)
  type clock = {
    mutable now : Consort.Time.t;
    mutable seq : int;
    mutable heap : entry array;
    mutable size : int;
  }

  let dummy = { time = 0; seq = 0; f = ignore; live = false }
  let create () = { now = 0; seq = 0; heap = Array.make 64 dummy; size = 0 }
  let before a b = a.time < b.time || (a.time = b.time && a.seq < b.seq)

  let insert c e =
    if c.size = Array.length c.heap then begin
      let h = Array.make (2 * c.size) dummy in
      Array.blit c.heap 0 h 0 c.size;
      c.heap <- h
    end;
    let h = c.heap in
    let rec up i =
      if i > 0 then begin
        let p = (i - 1) / 2 in
        if before e h.(p) then begin
          h.(i) <- h.(p);
          up p
        end
        else h.(i) <- e
      end
      else h.(i) <- e
    in
    up c.size;
    c.size <- c.size + 1

  let pop c =
    let h = c.heap in
    let top = h.(0) in
    c.size <- c.size - 1;
    let last = h.(c.size) in
    h.(c.size) <- dummy;
    if c.size > 0 then begin
      let rec down i =
        let l = (2 * i) + 1 in
        if l >= c.size then h.(i) <- last
        else
          let m = if l + 1 < c.size && before h.(l + 1) h.(l) then l + 1 else l in
          if before h.(m) last then begin
            h.(i) <- h.(m);
            down m
          end
          else h.(i) <- last
      in
      down 0
    end;
    top

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
    if c.size = 0 then None
    else
      let e = c.heap.(0) in
      if not e.live then begin
        ignore (pop c : entry);
        next c
      end
      else Some e.time

  let rec run_due c =
    if c.size > 0 && c.heap.(0).time <= c.now then begin
      let e = pop c in
      if e.live then e.f ();
      run_due c
    end

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
