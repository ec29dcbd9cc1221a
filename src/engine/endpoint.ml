open Consort

let src = Logs.Src.create "consort.endpoint" ~doc:"Stacks bound to transports"

module Log = (val Logs.src_log src : Logs.LOG)

type error =
  | Bad_address of { member : string; reason : string }
  | Bad_stack of string
  | Open of Transport.error

let pp_error ppf = function
  | Bad_address { member; reason } -> Fmt.pf ppf "bad member address %s: %s" member reason
  | Bad_stack e -> Fmt.pf ppf "the layers do not make a stack: %s" e
  | Open e -> Fmt.pf ppf "cannot open the connection: %a" Transport.pp_error e

module Make (T : Transport.S) = struct
  type t = {
    tr : T.t;
    stack : Stack.t Lazy.t;
    conn : T.connection Lazy.t;
    addrs : T.address array;
    mutable scheduled : Time.t;
    mutable timer : T.timer option;
    mutable closed : bool;
    mutable send_errors : int;
  }

  let stack t = Lazy.force t.stack
  let connection t = Lazy.force t.conn

  let rec reschedule t =
    if not t.closed then begin
      let next = Stack.next_alarm (stack t) in
      if next < t.scheduled then begin
        Option.iter T.cancel t.timer;
        t.scheduled <- next;
        t.timer <- Some (T.at t.tr next (fun () -> fire t))
      end
    end

  and fire t =
    t.timer <- None;
    t.scheduled <- max_int;
    if not t.closed then begin
      Stack.timer (stack t) (T.now t.tr);
      reschedule t
    end

  let guard t f =
    f ();
    reschedule t

  let report t = function
    | Ok () -> ()
    | Error `Closed -> ()
    | Error e ->
        t.send_errors <- t.send_errors + 1;
        Log.warn (fun m -> m "send failed: %a" Transport.pp_error e)

  let net t dst msg =
    if not t.closed then begin
      let conn = connection t in
      (match dst with
      | Event.Send r when r >= 0 && r < Array.length t.addrs -> report t (T.send conn ~dst:t.addrs.(r) msg)
      | Event.Send r -> Log.err (fun m -> m "send to rank %d outside the view" r)
      | Event.Cast ->
          let me = (Stack.view (stack t)).View.rank in
          let dsts = List.filteri (fun i _ -> i <> me) (Array.to_list t.addrs) in
          report t (T.cast conn ~dsts msg))
    end;
    Msg.release msg

  let create ?requires ?(params = Params.empty) ?(pool = Pool.default) tr ~(view : View.t) ~seed
      ~layers ~app () =
    let parse s =
      match T.address_of_string s with Ok a -> Ok a | Error reason -> Error (Bad_address { member = s; reason })
    in
    let rec all acc = function
      | [] -> Ok (Array.of_list (List.rev acc))
      | s :: rest -> ( match parse s with Ok a -> all (a :: acc) rest | Error e -> Error e)
    in
    match all [] (Array.to_list view.members) with
    | Error e -> Error e
    | Ok addrs -> (
        match Stack.check ?requires layers with
        | Error e -> Error (Bad_stack e)
        | Ok () -> (
            let self = ref None in
            let get () = match !self with Some t -> t | None -> assert false in
            let ctx =
              { Layer.view; rng = Rng.create seed; params; pool; now = (fun () -> T.now tr) }
            in
            let stack =
              lazy
                (match Stack.create ?requires ctx layers ~net:(fun d m -> net (get ()) d m) ~app with
                | Ok s -> s
                | Error e -> failwith ("Endpoint: a stack that passed its check failed to build: " ^ e))
            in
            let handler _conn =
              {
                T.recv =
                  (fun ~src:_ v ->
                    let t = get () in
                    if t.closed then Iovec.release v
                    else guard t (fun () -> Stack.recv (Lazy.force stack) (Msg.of_iovec v)));
                closed =
                  (fun () ->
                    match !self with
                    | Some t when not t.closed ->
                        t.closed <- true;
                        Option.iter T.cancel t.timer;
                        t.timer <- None
                    | _ -> ());
              }
            in
            match T.open_ tr addrs.(view.rank) handler with
            | Error e -> Error (Open e)
            | Ok conn ->
                let t =
                  {
                    tr;
                    stack;
                    conn = Lazy.from_val conn;
                    addrs;
                    scheduled = max_int;
                    timer = None;
                    closed = false;
                    send_errors = 0;
                  }
                in
                self := Some t;
                ignore (Lazy.force t.stack);
                reschedule t;
                Ok t))

  let cast t msg = if t.closed then Msg.release msg else guard t (fun () -> Stack.cast (stack t) msg)
  let send t r msg = if t.closed then Msg.release msg else guard t (fun () -> Stack.send (stack t) r msg)
  let dn_ctl t e = if not t.closed then guard t (fun () -> Stack.dn_ctl (stack t) e)

  let close t =
    if not t.closed then begin
      Stack.dn_ctl (stack t) Event.Stop;
      t.closed <- true;
      Option.iter T.cancel t.timer;
      t.timer <- None;
      T.close (connection t)
    end

  let send_errors t = t.send_errors
  let is_closed t = t.closed
end
