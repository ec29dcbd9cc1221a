open Consort

type net = { loss : float; dup : float; min_delay : Time.t; max_delay : Time.t }

let perfect = { loss = 0.; dup = 0.; min_delay = Time.of_ms 1; max_delay = Time.of_ms 1 }
let faulty = { loss = 0.3; dup = 0.1; min_delay = Time.of_us 100; max_delay = Time.of_ms 5 }

module Q = Map.Make (struct
  type t = Time.t * int

  let compare (a, i) (b, j) = if a <> b then compare a b else compare i j
end)

type event = Datagram of int * Iovec.t | Action of (unit -> unit)

type t = {
  mutable now : Time.t;
  mutable queue : event Q.t;
  mutable id : int;
  mutable datagrams : int;
  rng : Rng.t;
  net : net;
  drop : src:int -> dst:int -> string -> bool;
  pool : Pool.t;
  mutable stacks : Stack.t array;
}

let now t = t.now
let stack t i = t.stacks.(i)
let datagrams t = t.datagrams

let push t time ev =
  t.id <- t.id + 1;
  t.queue <- Q.add (time, t.id) ev t.queue

let at t time f = push t time (Action f)

let delay t =
  if t.net.max_delay <= t.net.min_delay then t.net.min_delay
  else t.net.min_delay + Rng.int t.rng (t.net.max_delay - t.net.min_delay)

let transmit t i dst msg =
  let v = Msg.to_iovec t.pool msg in
  Msg.release msg;
  let n = Array.length t.stacks in
  let dsts =
    match dst with
    | Event.Cast -> List.filter (fun j -> j <> i) (List.init n Fun.id)
    | Event.Send j -> [ j ]
  in
  List.iter
    (fun j ->
      t.datagrams <- t.datagrams + 1;
      if (not (t.drop ~src:i ~dst:j (Iovec.to_string v))) && not (Rng.chance t.rng t.net.loss) then begin
        push t (t.now + delay t) (Datagram (j, Iovec.retain v));
        if Rng.chance t.rng t.net.dup then push t (t.now + delay t) (Datagram (j, Iovec.retain v))
      end)
    dsts;
  Iovec.release v

let create ?(params = Params.empty) ?fused ?(net = faulty) ?(drop = fun ~src:_ ~dst:_ _ -> false)
    ~seed ~pool ~n ~layers ~deliver () =
  let t =
    {
      now = 0;
      queue = Q.empty;
      id = 0;
      datagrams = 0;
      rng = Rng.create seed;
      net;
      drop;
      pool;
      stacks = [||];
    }
  in
  let members = Array.init n (Printf.sprintf "m%d") in
  let make i =
    let view = View.v ~group:"test" ~members ~rank:i () in
    let ctx =
      { Layer.view; rng = Rng.create ((seed * 1000) + i); params; pool; now = (fun () -> t.now) }
    in
    let app = { Stack.deliver = deliver i; ctl = ignore } in
    match Stack.create ?fused ctx layers ~net:(transmit t i) ~app with
    | Ok s -> s
    | Error e -> invalid_arg ("Harness.create: " ^ e)
  in
  t.stacks <- Array.init n make;
  t

let next_alarm t = Array.fold_left (fun acc s -> min acc (Stack.next_alarm s)) max_int t.stacks

let run ?(until = max_int) ?(max_steps = max_int) ?(every = ignore) t =
  let rec loop steps =
    let q = match Q.min_binding_opt t.queue with Some ((time, _), _) -> time | None -> max_int in
    let a = next_alarm t in
    if q = max_int && a = max_int then `Quiescent
    else if steps >= max_steps || min q a > until then `Timeout
    else begin
      if a <= q then begin
        t.now <- max t.now a;
        Array.iter (fun s -> if Stack.next_alarm s <= t.now then Stack.timer s t.now) t.stacks
      end
      else begin
        let ((time, _) as key), ev = Q.min_binding t.queue in
        t.queue <- Q.remove key t.queue;
        t.now <- max t.now time;
        match ev with
        | Action f -> f ()
        | Datagram (j, v) -> Stack.recv t.stacks.(j) (Msg.of_iovec v)
      end;
      every ();
      loop (steps + 1)
    end
  in
  loop 0

let stop t =
  Array.iter (fun s -> Stack.dn_ctl s Event.Stop) t.stacks;
  Q.iter (fun _ ev -> match ev with Datagram (_, v) -> Iovec.release v | Action _ -> ()) t.queue;
  t.queue <- Q.empty

let counter t i layer name =
  match List.assoc_opt layer (Stack.counters t.stacks.(i)) with
  | None -> invalid_arg ("Harness.counter: no layer " ^ layer)
  | Some l -> (
      match List.assoc_opt name l with
      | Some v -> v
      | None -> invalid_arg (Printf.sprintf "Harness.counter: no counter %s.%s" layer name))
