open Consort_cap
module Loop = Consort_engine.Loop
module R = Rpc_udp
module Vc = Consort_capvc.Vc
module E = Consort_capvc.Vc_end
module P = Proc_proto
module Time = Consort.Time

type outcome = { kind : P.kind; code : int; text : string }
type error = [ `Refused of Status.t * string | `Unknown of string ]

let pp_error ppf = function
  | `Refused (st, why) ->
      if why = "" then Status.pp ppf st else Fmt.pf ppf "%a: %s" Status.pp st why
  | `Unknown why -> Fmt.pf ppf "outcome unknown: %s" why

let write_all fd s =
  let rec go off =
    if off < String.length s then go (off + Unix.write_substring fd s off (String.length s - off))
  in
  try go 0 with Unix.Unix_error _ -> ()

(* A port for circuits kept across starts: the process server's node that reaches it keeps its
   session (no locate, no handshake at the next start). Each start has circuits of its own, with
   their own capabilities, hung up when it ends: a program of an earlier start that still holds
   its circuits' capabilities is refused ([hungup], then [STD_NOTFOUND]) and can never write into
   a later start's. *)
type circuits = {
  c_node : R.node;
  c_srv : R.server;
  c_host : Vc.t;
  mutable c_timer : Loop.timer option;
}

let circuits node =
  let loop = R.transport node in
  let key = Port.Key.generate () in
  let srv = R.serve node key in
  let host = Vc.create_host (Port.Key.port key) in
  let now () = Loop.now loop in
  R.listen srv (fun r ->
      Vc.handle host ~now:(now ()) (R.header r) (R.data r) (fun (h, d) -> R.putrep r h d));
  let c = { c_node = node; c_srv = srv; c_host = host; c_timer = None } in
  let rec tick () =
    Vc.tick host ~now:(now ());
    c.c_timer <- Some (Loop.after loop (Time.of_ms 200) tick)
  in
  tick ();
  c

let close_circuits c =
  Option.iter Loop.cancel c.c_timer;
  c.c_timer <- None;
  R.stop c.c_srv

(* A start's circuits on a kept port when it has room, else on a port of the start's own. *)
let open_circuits node kept =
  let loop = R.transport node in
  let now () = Loop.now loop in
  let on_kept =
    match kept with
    | Some k when k.c_node == node && k.c_timer <> None -> (
        match (Vc.create k.c_host ~now:(now ()), Vc.create k.c_host ~now:(now ())) with
        | Ok c1, Ok c2 -> Some (k.c_host, c1, c2)
        | Ok c, _ | _, Ok c ->
            Vc.hangup k.c_host ~now:(now ()) c.Vc.a "no room for a start";
            None
        | Error `Full, Error `Full -> None)
    | _ -> None
  in
  match on_kept with
  | Some (host, c1, c2) ->
      (* The start's end: its circuits hung up; nothing more passes on them. *)
      let hang why =
        Vc.hangup host ~now:(now ()) c1.Vc.a why;
        Vc.hangup host ~now:(now ()) c2.Vc.a why
      in
      (host, c1, c2, (fun () -> hang "its caller hung up"), fun () -> hang "the start ended")
  | None ->
      let key = Port.Key.generate () in
      let srv = R.serve node key in
      let host = Vc.create_host (Port.Key.port key) in
      (* Once the caller is gone: nothing more is answered, as from a dead caller. *)
      let hung = ref false in
      R.listen srv (fun r ->
          if not !hung then
            Vc.handle host ~now:(now ()) (R.header r) (R.data r) (fun (h, d) -> R.putrep r h d));
      let live = ref true in
      let rec tick () =
        Vc.tick host ~now:(now ());
        if !live then ignore (Loop.after loop (Time.of_ms 200) tick)
      in
      tick ();
      let c1 = Result.get_ok (Vc.create host ~now:(now ()))
      and c2 = Result.get_ok (Vc.create host ~now:(now ())) in
      ( host,
        c1,
        c2,
        (fun () ->
          hung := true;
          R.stop srv),
        fun () ->
          live := false;
          if not !hung then R.stop srv )

let start node ?control ?circuits ~server ~program ?(args = []) ?(caps = [])
    ?(limits = Pd.no_limits) ?(hints = []) ?stdin ?(stdout = write_all Unix.stdout)
    ?(stderr = write_all Unix.stderr) ?output ?(interrupt = fun () -> false)
    ?(hangup = fun () -> false) ?(started = ignore) k =
  let loop = R.transport node in
  let host, c1, c2, hang_up, close_host = open_circuits node circuits in
  let now () = Loop.now loop in
  let hung = ref false in
  let live = ref true in
  let a1 = E.local host ~now c1.Vc.a and a2 = E.local host ~now c2.Vc.a in
  (* Output: read each circuit to its end. *)
  let out_done = ref 0 in
  let on_out_done = ref ignore in
  (* The next read once the last bytes were written: a caller slow to take its output holds up
     its own circuits only. *)
  let rec pump e out =
    E.read e (function
      | `Data d -> out d (fun () -> pump e out)
      | `Intr -> pump e out
      | `Eof | `Hangup _ ->
          incr out_done;
          !on_out_done ())
  in
  let out1, out2 =
    match output with
    | Some (o1, o2) -> (o1, o2)
    | None ->
        ( (fun d k ->
            stdout d;
            k ()),
          fun d k ->
            stderr d;
            k () )
  in
  pump a1 out1;
  pump a2 out2;
  (* Input. *)
  let watched = ref None in
  let stop_input () =
    match !watched with
    | Some fd ->
        watched := None;
        Loop.unwatch loop fd
    | None -> ()
  in
  (match stdin with
  | None -> ()
  | Some fd ->
      let buf = Bytes.create Consort_capvc.Vc_proto.max_chunk in
      let rec on_readable () =
        match Unix.read fd buf 0 (Bytes.length buf) with
        | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EINTR), _, _) -> ()
        | exception Unix.Unix_error _ ->
            stop_input ();
            E.close a1 ignore
        | 0 ->
            stop_input ();
            E.close a1 ignore
        | n ->
            stop_input ();
            E.write a1 (Bytes.sub_string buf 0 n) (function Ok () -> watch () | Error _ -> ())
      and watch () =
        if !live then
          match Loop.watch loop fd on_readable with
          | () -> watched := Some fd
          | exception (Unix.Unix_error _ | Invalid_argument _) ->
              (* A regular file: it never blocks; read it on the loop. *)
              ignore (Loop.after loop 0 on_readable)
      in
      watch ());
  (* The process, once it runs: with no input circuit, an interrupt is a
     SIGINT asked of the server. *)
  let proc = ref None in
  let rec poll_intr () =
    if !live && (not !hung) && hangup () then begin
      hung := true;
      hang_up ();
      (* And SIGHUP at once, as a terminal's hangup (the server would send it once it found the
         circuits dead, seconds later). *)
      match !proc with
      | Some p ->
          R.trans
            (Option.value control ~default:node)
            ~idempotent:false
            (Header.request ~offset:(P.signal_to_system Sys.sighup) p P.ps_signal)
            "" ignore
      | None -> ()
    end;
    if !live then begin
      if interrupt () then begin
        match (stdin, !proc) with
        | Some _, _ -> E.intr a1 ignore
        | None, Some p ->
            (* Not on [node]: its session is busy with the held ps_wait. *)
            R.trans
              (Option.value control ~default:node)
              ~idempotent:false
              (Header.request ~offset:(P.signal_to_system Sys.sigint) p P.ps_signal)
              "" ignore
        | None, None -> ()
      end;
      ignore (Loop.after loop (Time.of_ms 50) poll_intr)
    end
  in
  poll_intr ();
  let env = [ ("stdin", c1.Vc.b); ("stdout", c1.Vc.b); ("stderr", c2.Vc.b) ] in
  let env = if stdin = None then List.tl env else env in
  (* Told once: the circuits closed, the input no longer read, then [k]. *)
  let told = ref false in
  let drain_timer = ref None in
  let finish r =
    if not !told then begin
      told := true;
      live := false;
      Option.iter Loop.cancel !drain_timer;
      stop_input ();
      close_host ();
      k r
    end
  in
  (* The output the server passed on before answering its ps_wait: the circuits drain first
     (5 s at most). *)
  let ended r =
    if !out_done >= 2 then finish r
    else begin
      (on_out_done := fun () -> if !out_done >= 2 then finish r);
      drain_timer := Some (Loop.after loop (Time.of_sec 5.) (fun () -> finish r))
    end
  in
  match
    Pd.encode { Pd.arch = Pd.arch_bytecode; program; args; caps = env @ caps; limits; hints }
  with
  | Error e -> finish (Error (`Refused (`Argbad, e)))
  | Ok pd ->
      R.trans node ~idempotent:false (Header.request server P.ps_exec) pd (function
        | Error e -> (
            match Rpc_error.outcome e with
            | `Not_executed ->
                finish
                  (Error (`Refused (`Notfound, "the process server: " ^ Rpc_error.to_string e)))
            | `Unknown -> finish (Error (`Unknown (Rpc_error.to_string e))))
        | Ok (h, d) when h.Header.status <> `Ok -> finish (Error (`Refused (h.status, d)))
        | Ok (h, _) -> (
            match Header.cap h with
            | Error e -> finish (Error (`Unknown ("the process server's reply: " ^ e)))
            | Ok p ->
                proc := Some p;
                started p;
                (* A process may run for a day; each wait is held 10 s. *)
                let rec wait tries =
                  R.trans node ~idempotent:true (Header.request p P.ps_wait) "" (function
                    | Ok (h, _) when h.Header.status = `Notnow && tries > 0 -> wait (tries - 1)
                    | Ok (h, d) when h.Header.status = `Ok -> (
                        match P.kind_of_int h.Header.offset with
                        | Some kind -> ended (Ok { kind; code = h.Header.extra; text = d })
                        | None ->
                            ended (Error (`Unknown "the process server's reply makes no sense")))
                    | Ok (h, d) ->
                        ended
                          (Error (`Unknown (Fmt.str "waiting: %a %s" Status.pp h.Header.status d)))
                    | Error e -> ended (Error (`Unknown ("waiting: " ^ Rpc_error.to_string e))))
                in
                wait 100_000))

let exec node ?control ?circuits ~server ~program ?args ?caps ?limits ?hints ?stdin ?stdout ?stderr
    ?interrupt ?hangup ?started () =
  let result = ref None in
  start node ?control ?circuits ~server ~program ?args ?caps ?limits ?hints ?stdin ?stdout ?stderr
    ?interrupt ?hangup ?started (fun r -> result := Some r);
  let loop = R.transport node in
  Loop.run loop ~until:(fun () -> !result <> None);
  match !result with
  | Some r -> r
  | None -> Error (`Unknown "the loop stopped before the process server answered")
