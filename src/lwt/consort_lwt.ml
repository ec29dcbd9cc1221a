module Loop = Consort_engine.Loop

type t = {
  loop : Loop.t;
  mutable fd_event : Lwt_engine.event option;
  mutable timer : (Lwt_engine.event * Consort.Time.t) option;
  mutable steps : int;
  mutable waiters : ((unit -> bool) * unit Lwt.u) list;
  mutable attached : bool;
}

let steps t = t.steps

let cancel_timer t =
  Option.iter (fun (ev, _) -> Lwt_engine.stop_event ev) t.timer;
  t.timer <- None

let rec arm t =
  if t.attached then
    match Loop.next_deadline t.loop with
    | None -> cancel_timer t
    | Some d -> (
        match t.timer with
        | Some (_, armed) when armed = d -> ()
        | _ ->
            cancel_timer t;
            let delay = Float.max 0. (Consort.Time.to_sec (d - Loop.now t.loop)) in
            t.timer <-
              Some
                ( Lwt_engine.on_timer delay false (fun ev ->
                      Lwt_engine.stop_event ev;
                      t.timer <- None;
                      step t),
                  d ))

and step t =
  if t.attached then begin
    t.steps <- t.steps + 1;
    Loop.step t.loop;
    let ready, waiting = List.partition (fun (c, _) -> c ()) t.waiters in
    t.waiters <- waiting;
    List.iter (fun (_, u) -> Lwt.wakeup_later u ()) ready;
    arm t
  end

let attach loop =
  let t = { loop; fd_event = None; timer = None; steps = 0; waiters = []; attached = true } in
  let fd = Loop.descriptor loop in
  t.fd_event <- Some (Lwt_engine.on_readable fd (fun _ -> step t));
  (* A timer set outside a step (a cast from Lwt code) that comes first. *)
  Loop.on_wakeup loop (fun () -> arm t);
  arm t;
  t

let detach t =
  if t.attached then begin
    t.attached <- false;
    Option.iter Lwt_engine.stop_event t.fd_event;
    t.fd_event <- None;
    cancel_timer t;
    Loop.on_wakeup t.loop ignore;
    List.iter (fun (_, u) -> Lwt.wakeup_later_exn u (Failure "Consort_lwt: detached")) t.waiters;
    t.waiters <- []
  end

let wait t cond =
  if cond () then Lwt.return_unit
  else
    let p, u = Lwt.wait () in
    t.waiters <- (cond, u) :: t.waiters;
    p
