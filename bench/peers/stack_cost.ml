open Consort

type row = {
  stack : string;  (** what was measured *)
  path : string;  (** ["layered"] today; a fused path would be another row *)
  layers : int;
  ns_per_msg : float;
  words_per_msg : float;  (** minor words per message *)
  major_words_per_msg : float;
}

(* Two members' stacks in one process, wired back to back: what member 0's
   stack sends becomes one datagram buffer handed to member 1's stack (and
   the other way for acknowledgements and credits), as a transport would,
   with no system call between them. Member 0 casts; a message is done when
   member 1's application has it. Timers run when they are due, on the
   engine's clock, as in a member process. *)
let pair ?(sender = 0) ~fused layers =
  let members = [| "m0"; "m1" |] in
  let stacks = [| None; None |] in
  let delivered = ref 0 in
  let pending = Queue.create () in
  let net me dst msg =
    let v = Msg.to_iovec Pool.default msg in
    Msg.release msg;
    match dst with
    | Event.Cast -> Queue.push (1 - me, v) pending
    | Event.Send r when r <> me && r >= 0 && r < 2 -> Queue.push (r, v) pending
    | Event.Send _ -> Iovec.release v
  in
  let make me =
    let view = View.v ~group:"stack-cost" ~members ~rank:me () in
    let ctx =
      {
        Layer.view;
        rng = Rng.create (me + 1);
        params = Params.empty;
        pool = Pool.default;
        now = Consort_engine.Loop.clock;
      }
    in
    let app =
      {
        Stack.deliver =
          (fun _ msg ->
            if me = 1 - sender then incr delivered;
            Msg.release msg);
        ctl = ignore;
      }
    in
    match Stack.create ~fused ctx (layers ()) ~net:(net me) ~app with
    | Ok s -> stacks.(me) <- Some s
    | Error e -> failwith ("stack_cost: " ^ e)
  in
  make 0;
  make 1;
  let get i = Option.get stacks.(i) in
  (* Datagrams go through a queue, not a nested call, so that a stack is
     never re-entered from below while it is sending. *)
  let drain () =
    while not (Queue.is_empty pending) do
      let r, v = Queue.pop pending in
      Stack.recv (get r) (Msg.of_iovec v)
    done
  in
  let timers () =
    let now = Consort_engine.Loop.clock () in
    for i = 0 to 1 do
      let s = get i in
      if Stack.next_alarm s <= now then Stack.timer s now
    done
  in
  (get sender, delivered, drain, timers)

let measure ~iterations ~rounds f =
  let best = ref (infinity, infinity, infinity) in
  for _ = 1 to rounds do
    Gc.full_major ();
    let minor0 = Gc.minor_words () and _, _, major0 = Gc.counters () in
    let c = Mtime_clock.counter () in
    for _ = 1 to iterations do
      f ()
    done;
    let ns = Int64.to_float (Mtime.Span.to_uint64_ns (Mtime_clock.count c)) in
    let minor = Gc.minor_words () -. minor0 and _, promoted, major1 = Gc.counters () in
    ignore promoted;
    let n = float iterations in
    let bns, _, _ = !best in
    if ns /. n < bns then best := (ns /. n, minor /. n, (major1 -. major0) /. n)
  done;
  !best

let body = lazy (Pool.of_string Pool.default (String.make 16 'x'))

(* [sender]: the member that casts (the other one counts deliveries);
   [every]: timers run every [every] casts (a power of 2); [send]: the
   sender sends to the other member instead of casting. *)
let run_stack ?(sender = 0) ?(every = 64) ?(send = false) ~iterations ~rounds ~name ~fused ~layers
    () =
  let s, delivered, drain, timers = pair ~sender ~fused layers in
  if fused && not (Stack.fused s) then failwith (name ^ ": the stack is not fused");
  if send && fused && List.assoc_opt "sends_on" (Stack.fused_counters s) <> Some 1 then
    failwith (name ^ ": sends are not fused");
  let n_layers = List.length (layers ()) in
  let body = Lazy.force body in
  let i = ref 0 in
  let f () =
    if send then Stack.send s (1 - sender) (Msg.create [ Iovec.retain body ])
    else Stack.cast s (Msg.create [ Iovec.retain body ]);
    drain ();
    incr i;
    if !i land (every - 1) = 0 then timers ()
  in
  (* Warm up (Mnak's rings grow to what a status interval holds), then
     measure. *)
  for _ = 1 to iterations do
    f ()
  done;
  let before = !delivered and casts_before = !i in
  let ns, w, mw = measure ~iterations ~rounds f in
  let casts = !i - casts_before and got = !delivered - before in
  if got <> casts then
    Error
      (Printf.sprintf "%s: member 1 delivered %d of %d casts (the stack stalled or lost messages)"
         name got casts)
  else
    Ok
      {
        stack = name;
        path = (if fused then "fused" else "layered");
        layers = n_layers;
        ns_per_msg = ns;
        words_per_msg = w;
        major_words_per_msg = mw;
      }

(* Nine layers with a varint header each (a counter), and Bottom, with
   their common case declared: the counter is the varying field. Made once, so that the
   fused path finds their declarations. *)
let seq_layer i : Layer.t =
  Layer.fast
    (module struct
      type t = { out : int Layer.out; mutable next : int }
      type header = int

      let name = Printf.sprintf "seq%d" i
      let codec = Codec.varint
      let pp_header = Fmt.int
      let provides = []
      let requires = []
      let create _ out = { out; next = 0 }
      let up t src _ msg = t.out.up src msg

      let dn t dst msg =
        t.next <- t.next + 1;
        t.out.dn dst (t.next land 0xffff) msg

      let up_ctl t e = t.out.up_ctl e
      let dn_ctl t e = t.out.dn_ctl e
      let timer _ _ = ()
      let counters _ = []

      let cast =
        {
          Layer.nfields = 1;
          live = None;
          up_live = false;
          length = false;
          framed = false;
          size = (fun a off -> Codec.varint_size a.(off));
          dn_ok = (fun _ _ _ -> true);
          dn_fast =
            (fun t _ _ _ ~layered:_ a off ->
              t.next <- t.next + 1;
              a.(off) <- t.next land 0xffff);
          dn_after = Layer.nothing_dn_after;
          up_ok = (fun _ _ _ _ _ -> true);
          up_fast = Layer.nothing_up_fast;
          up_after = Layer.nothing_up_after;
          expand = (fun a off -> a.(off));
        }

      let state t = string_of_int t.next
    end)

let seq = lazy (List.init 9 seq_layer @ [ Consort_group.Bottom.layer ])
let seq_layers () = Lazy.force seq
let baseline_name = "Bottom alone"

let run ?(iterations = 50_000) ?(rounds = 3) () =
  let default () =
    match Consort_group.Properties.layers Consort_group.Properties.vsync with
    | Ok l -> l
    | Error e -> failwith (Fmt.str "%a" Consort_group.Properties.pp_error e)
  in
  let desc = Consort_group.Properties.describe Consort_group.Properties.vsync in
  let ( let* ) = Result.bind in
  let total () =
    match Consort_group.Properties.(layers (vsync @ [ Total ])) with
    | Ok l -> l
    | Error e -> failwith (Fmt.str "%a" Consort_group.Properties.pp_error e)
  in
  let tdesc = Consort_group.Properties.(describe (vsync @ [ Total ])) in
  let oname = "total order (vsync+Total, the sequencer casts: " ^ tdesc ^ ")" in
  (* Another member casts: the sequencer orders each cast on its next
     timer, here after every cast (one order per cast, the worst case);
     at the receivers the cast waits for its order at Total. *)
  let pname = "total order, another member casts (vsync+Total, one order per cast)" in
  let dname = "default (vsync: " ^ desc ^ ")"
  and tname = "10 layers: 9 with a varint header each, and Bottom" in
  (* Layered and fused one after the other, twice, keeping the better of
     each: the machine is shared. *)
  let best a b = if b.ns_per_msg < a.ns_per_msg then b else a in
  let* dl = run_stack ~iterations ~rounds ~name:dname ~fused:false ~layers:default () in
  let* df = run_stack ~iterations ~rounds ~name:dname ~fused:true ~layers:default () in
  let* tl = run_stack ~iterations ~rounds ~name:tname ~fused:false ~layers:seq_layers () in
  let* tf = run_stack ~iterations ~rounds ~name:tname ~fused:true ~layers:seq_layers () in
  let* dl2 = run_stack ~iterations ~rounds ~name:dname ~fused:false ~layers:default () in
  let* df2 = run_stack ~iterations ~rounds ~name:dname ~fused:true ~layers:default () in
  let sname = "sends, default (vsync: " ^ desc ^ ")" in
  let sends ~fused = run_stack ~send:true ~iterations ~rounds ~name:sname ~fused ~layers:default in
  let* sl = sends ~fused:false () in
  let* sf = sends ~fused:true () in
  let* sl2 = sends ~fused:false () in
  let* sf2 = sends ~fused:true () in
  let* ol = run_stack ~iterations ~rounds ~name:oname ~fused:false ~layers:total () in
  let* of_ = run_stack ~iterations ~rounds ~name:oname ~fused:true ~layers:total () in
  let* ol2 = run_stack ~iterations ~rounds ~name:oname ~fused:false ~layers:total () in
  let* of2 = run_stack ~iterations ~rounds ~name:oname ~fused:true ~layers:total () in
  let other ~fused = run_stack ~sender:1 ~every:1 ~iterations ~rounds ~name:pname ~fused in
  let* pl = other ~fused:false ~layers:total () in
  let* pf = other ~fused:true ~layers:total () in
  let* pl2 = other ~fused:false ~layers:total () in
  let* pf2 = other ~fused:true ~layers:total () in
  (* The baseline: the same harness with Bottom alone, layered. *)
  let* b =
    run_stack ~iterations ~rounds ~name:baseline_name ~fused:false
      ~layers:(fun () -> [ Consort_group.Bottom.layer ])
      ()
  in
  Ok
    [
      best df df2;
      best dl dl2;
      best sf sf2;
      best sl sl2;
      best of_ of2;
      best ol ol2;
      best pf pf2;
      best pl pl2;
      tf;
      tl;
      b;
    ]

let run_default ?(iterations = 50_000) ?(rounds = 3) ?send ~fused () =
  let layers () =
    match Consort_group.Properties.layers Consort_group.Properties.vsync with
    | Ok l -> l
    | Error e -> failwith (Fmt.str "%a" Consort_group.Properties.pp_error e)
  in
  let name =
    "default (vsync: " ^ Consort_group.Properties.describe Consort_group.Properties.vsync ^ ")"
  in
  let name = if send = Some true then "sends, " ^ name else name in
  Result.map (fun r -> [ r ]) (run_stack ?send ~iterations ~rounds ~name ~fused ~layers ())

let ratios rows =
  let find name path =
    List.find_opt
      (fun r ->
        r.path = path
        && String.length r.stack >= String.length name
        && String.sub r.stack 0 (String.length name) = name)
      rows
  in
  match find baseline_name "layered" with
  | None -> []
  | Some b ->
      List.filter_map
        (fun (label, name) ->
          match (find name "fused", find name "layered") with
          | Some f, Some l ->
              let above x y =
                if y -. b.ns_per_msg <= 0. then nan else (x -. b.ns_per_msg) /. (y -. b.ns_per_msg)
              in
              let abovew x y =
                if y -. b.words_per_msg <= 0. then nan
                else (x -. b.words_per_msg) /. (y -. b.words_per_msg)
              in
              Some
                (Printf.sprintf
                   "ratio fused / layered, %s: %.2f in ns (%.0f / %.0f), %.2f in minor words (%.1f \
                    / %.1f); above the baseline (%s: %.0f ns, %.1f words): %.2f in ns, %.2f in \
                    words; words per layer and message above it: %.2f fused, %.2f layered"
                   label (f.ns_per_msg /. l.ns_per_msg) f.ns_per_msg l.ns_per_msg
                   (f.words_per_msg /. l.words_per_msg)
                   f.words_per_msg l.words_per_msg baseline_name b.ns_per_msg b.words_per_msg
                   (above f.ns_per_msg l.ns_per_msg)
                   (abovew f.words_per_msg l.words_per_msg)
                   ((f.words_per_msg -. b.words_per_msg) /. float (2 * (f.layers - 1)))
                   ((l.words_per_msg -. b.words_per_msg) /. float (2 * (l.layers - 1))))
          | _ -> None)
        [
          ("default stack", "default");
          ("default stack, sends", "sends, default");
          ("total-order stack", "total order (");
          ("total-order stack, another member casts", "total order, another");
          ("10-layer stack", "10 layers");
        ]

let to_json rows =
  `List
    (List.map
       (fun r ->
         `Assoc
           [
             ("stack", `String r.stack);
             ("path", `String r.path);
             ("layers", `Int r.layers);
             ("ns_per_msg", `Float r.ns_per_msg);
             ("minor_words_per_msg", `Float r.words_per_msg);
             ("major_words_per_msg", `Float r.major_words_per_msg);
           ])
       rows)

(* The harness's own work for one message with no stack: the message made,
   copied to one buffer as a transport would, handed over through the
   queue, taken back as a message and released, as [pair]'s net and
   deliver do. *)
let harness_alone ~iterations ~rounds =
  let body = Lazy.force body in
  let pending = Queue.create () in
  let delivered = ref 0 in
  let f () =
    let msg = Msg.create [ Iovec.retain body ] in
    let v = Msg.to_iovec Pool.default msg in
    Msg.release msg;
    Queue.push (1, v) pending;
    while not (Queue.is_empty pending) do
      let _, v = Queue.pop pending in
      let m = Msg.of_iovec v in
      incr delivered;
      Msg.release m
    done
  in
  for _ = 1 to iterations do
    f ()
  done;
  let ns, w, _ = measure ~iterations ~rounds f in
  (ns, w)

let default_layers () =
  match Consort_group.Properties.layers Consort_group.Properties.vsync with
  | Ok l -> l
  | Error e -> failwith (Fmt.str "%a" Consort_group.Properties.pp_error e)

let by_layer ?only ~iterations ~rounds () =
  let all = default_layers () in
  let n = List.length all in
  let ks = match only with Some k -> [ k ] | None -> List.init n (fun i -> i + 1) in
  let paths = match only with Some _ -> [ true ] | None -> [ true; false ] in
  let rec go acc = function
    | [] -> Ok (List.rev acc)
    | (k, fused) :: rest -> (
        let layers () = List.filteri (fun i _ -> i >= n - k) all in
        let name = String.concat ":" (List.map Layer.name (layers ())) in
        match run_stack ~iterations ~rounds ~name ~fused ~layers () with
        | Ok r -> go (r :: acc) rest
        | Error e -> Error e)
  in
  go [] (List.concat_map (fun k -> List.map (fun p -> (k, p)) paths) ks)
