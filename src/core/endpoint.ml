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
  (* A stack bound to a connection it does not own: what goes out of its
     lowest layer is sent to the view's addresses, its alarms are timers. *)
  module Binding = struct
    type t = {
      tr : T.t;
      mutable conn : T.connection;
      stack : Stack.t Lazy.t;
      addrs : T.address array;
      rank : int;
      mutable others : T.address list; (* where a cast goes: every address but this member's *)
      mutable scheduled : Time.t;
      mutable timer : T.timer option;
      mutable stopped : bool;
      mutable send_errors : int;
    }

    let stack t = Lazy.force t.stack
    let addrs t = t.addrs
    let is_stopped t = t.stopped

    let rec reschedule t =
      if not t.stopped then begin
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
      if not t.stopped then begin
        Stack.timer (stack t) (T.now t.tr);
        reschedule t
      end

    let guard t f =
      if not t.stopped then f ();
      reschedule t

    let report t = function
      | Ok () -> ()
      | Error `Closed -> ()
      | Error e ->
          t.send_errors <- t.send_errors + 1;
          Log.warn (fun m -> m "send failed: %a" Transport.pp_error e)

    let net t dst msg =
      if not t.stopped then begin
        match dst with
        | Event.Send r when r >= 0 && r < Array.length t.addrs ->
            report t (T.send t.conn ~dst:t.addrs.(r) msg)
        | Event.Send r -> Log.err (fun m -> m "send to rank %d outside the view" r)
        | Event.Cast -> report t (T.cast t.conn ~dsts:t.others msg)
      end;
      Msg.release msg

    let bind ?requires ?(params = Params.empty) ?(pool = Pool.default) tr conn ~(view : View.t)
        ~addrs ~rng ~layers ~app () =
      if Array.length addrs <> View.nmembers view then
        Error (Bad_stack "one address per member is needed")
      else
        let self = ref None in
        let ctx = { Layer.view; rng; params; pool; now = (fun () -> T.now tr) } in
        match
          Stack.create ?requires ctx layers
            ~net:(fun d m -> match !self with Some t -> net t d m | None -> Msg.release m)
            ~app
        with
        | Error e -> Error (Bad_stack e)
        | Ok st ->
            let t =
              {
                tr;
                conn;
                stack = Lazy.from_val st;
                addrs;
                rank = view.View.rank;
                others = List.filteri (fun i _ -> i <> view.View.rank) (Array.to_list addrs);
                scheduled = max_int;
                timer = None;
                stopped = false;
                send_errors = 0;
              }
            in
            self := Some t;
            reschedule t;
            Ok t

    (* As [guard], without a closure per message. *)
    let recv t v =
      if t.stopped then Iovec.release v
      else begin
        Stack.recv (stack t) (Msg.of_iovec v);
        reschedule t
      end

    let cast t msg =
      if t.stopped then Msg.release msg
      else begin
        Stack.cast (stack t) msg;
        reschedule t
      end

    let send t r msg =
      if t.stopped then Msg.release msg
      else begin
        Stack.send (stack t) r msg;
        reschedule t
      end

    let dn_ctl t e = guard t (fun () -> Stack.dn_ctl (stack t) e)

    let halt t =
      t.stopped <- true;
      Option.iter T.cancel t.timer;
      t.timer <- None

    let stop t =
      if not t.stopped then begin
        Stack.dn_ctl (stack t) Event.Stop;
        halt t
      end

    let send_errors t = t.send_errors

    (* A member moved: what goes to rank [r] goes to [a] from now on. *)
    let set_addr t r a =
      if r >= 0 && r < Array.length t.addrs then begin
        t.addrs.(r) <- a;
        t.others <- List.filteri (fun i _ -> i <> t.rank) (Array.to_list t.addrs)
      end

    let set_conn t conn = t.conn <- conn
  end

  type t = { conn : T.connection; mutable b : Binding.t option; mutable closed : bool }

  let binding t = match t.b with Some b -> b | None -> invalid_arg "Endpoint: not bound"
  let stack t = Binding.stack (binding t)
  let connection t = t.conn

  let create ?requires ?(params = Params.empty) ?(pool = Pool.default) tr ~(view : View.t) ~seed
      ~layers ~app () =
    let parse s =
      match T.address_of_string s with
      | Ok a -> Ok a
      | Error reason -> Error (Bad_address { member = s; reason })
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
            let handler _conn =
              {
                T.recv =
                  (fun ~src:_ v ->
                    match !self with
                    | Some { b = Some b; closed = false; _ } -> Binding.recv b v
                    | _ -> Iovec.release v);
                closed =
                  (fun () ->
                    match !self with
                    | Some t when not t.closed ->
                        t.closed <- true;
                        Option.iter Binding.halt t.b
                    | _ -> ());
              }
            in
            match T.open_ tr addrs.(view.rank) handler with
            | Error e -> Error (Open e)
            | Ok conn -> (
                let t = { conn; b = None; closed = false } in
                self := Some t;
                match
                  Binding.bind ?requires ~params ~pool tr conn ~view ~addrs ~rng:(Rng.create seed)
                    ~layers ~app ()
                with
                | Error e ->
                    T.close conn;
                    Error e
                | Ok b ->
                    t.b <- Some b;
                    Ok t)))

  let cast t msg = if t.closed then Msg.release msg else Binding.cast (binding t) msg
  let send t r msg = if t.closed then Msg.release msg else Binding.send (binding t) r msg
  let dn_ctl t e = if not t.closed then Binding.dn_ctl (binding t) e

  let close t =
    if not t.closed then begin
      Binding.stop (binding t);
      t.closed <- true;
      T.close t.conn
    end

  let send_errors t = Binding.send_errors (binding t)
  let is_closed t = t.closed
end
