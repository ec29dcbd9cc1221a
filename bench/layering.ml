open Consort

type row = { layers : int; kind : string; ns_per_msg : float; words_per_msg : float }

(* A layer with a small typed header, to show what a header costs. *)
module Seq (N : sig
  val name : string
end) : Layer.S = struct
  type t = { out : int Layer.out; mutable next : int }
  type header = int

  let name = N.name
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
end

let pass i : Layer.t =
  (module Layer.Pass (struct
    let name = Printf.sprintf "pass%d" i
  end))

let seq i : Layer.t =
  (module Seq (struct
    let name = Printf.sprintf "seq%d" i
  end))

let measure ~iterations f =
  let best_ns = ref infinity and best_w = ref infinity in
  for _ = 1 to 5 do
    Gc.compact ();
    let w0 = Gc.minor_words () in
    let c = Mtime_clock.counter () in
    for _ = 1 to iterations do
      f ()
    done;
    let ns = Mtime.Span.to_uint64_ns (Mtime_clock.count c) |> Int64.to_float in
    let w = Gc.minor_words () -. w0 in
    best_ns := Float.min !best_ns (ns /. float iterations);
    best_w := Float.min !best_w (w /. float iterations)
  done;
  (!best_ns, !best_w)

let view = View.v ~group:"bench" ~members:[| "a" |] ~rank:0 ()

let stack_of layers =
  let delivered = ref 0 in
  let st = ref None in
  (* The bottom hands the datagram back up as a transport would: as one
     received buffer holding headers and body. *)
  let net _dst msg =
    let v = Msg.to_iovec Pool.default msg in
    Msg.release msg;
    match !st with Some s -> Stack.recv s (Msg.of_iovec v) | None -> Iovec.release v
  in
  let app =
    {
      Stack.deliver =
        (fun _ msg ->
          incr delivered;
          Msg.release msg);
      ctl = ignore;
    }
  in
  let ctx =
    {
      Layer.view;
      rng = Rng.create 1;
      params = Params.empty;
      pool = Pool.default;
      now = (fun () -> 0);
    }
  in
  match Stack.create ctx layers ~net ~app with
  | Ok s ->
      st := Some s;
      (s, delivered)
  | Error e -> failwith e

let run ?(iterations = 200_000) ?(depths = [ 1; 5; 10; 20 ]) () =
  let body = Pool.of_string Pool.default (String.make 16 'x') in
  (* Baseline: the same message work with the layers replaced by one direct
     call: make a message, turn it into a datagram as the bottom of a stack
     does, and hand that to a function that delivers it. *)
  let sink = ref 0 in
  let deliver (msg : Msg.t) =
    incr sink;
    Msg.release msg
  in
  let deliver = Sys.opaque_identity deliver in
  let direct () =
    let msg = Msg.create [ Iovec.retain body ] in
    let v = Msg.to_iovec Pool.default msg in
    Msg.release msg;
    deliver (Msg.of_iovec v)
  in
  ignore (measure ~iterations direct);
  let ns, w = measure ~iterations direct in
  let rows = ref [ { layers = 0; kind = "direct"; ns_per_msg = ns; words_per_msg = w } ] in
  List.iter
    (fun (kind, mk) ->
      List.iter
        (fun d ->
          let s, delivered = stack_of (List.init d mk) in
          let f () = Stack.cast s (Msg.create [ Iovec.retain body ]) in
          let ns, w = measure ~iterations f in
          if !delivered <> 5 * iterations then failwith "layering bench: messages lost";
          rows := { layers = d; kind; ns_per_msg = ns; words_per_msg = w } :: !rows)
        depths)
    [ ("pass", pass); ("seq", seq) ];
  (* The baseline again, after the stacks: the machine is shared, so keep
     the better of the two. *)
  let ns2, w2 = measure ~iterations direct in
  Iovec.release body;
  let rows = List.rev !rows in
  match rows with
  | d :: rest when ns2 < d.ns_per_msg -> { d with ns_per_msg = ns2; words_per_msg = w2 } :: rest
  | rows -> rows

let pp_table ppf rows =
  let base = match rows with r :: _ -> r.ns_per_msg | [] -> 1. in
  Fmt.pf ppf "%-8s %6s %12s %14s %10s@." "kind" "layers" "ns/msg" "words/msg" "x direct";
  List.iter
    (fun r ->
      Fmt.pf ppf "%-8s %6d %12.1f %14.1f %10.1f@." r.kind r.layers r.ns_per_msg r.words_per_msg
        (r.ns_per_msg /. base))
    rows;
  (* The slope between the shallowest and the deepest stack of each kind is
     what one more layer costs, independent of the fixed part. *)
  List.iter
    (fun kind ->
      match List.filter (fun r -> r.kind = kind) rows with
      | [] | [ _ ] -> ()
      | first :: _ as l ->
          let last = List.nth l (List.length l - 1) in
          let dl = float (last.layers - first.layers) in
          Fmt.pf ppf "%s: %.1f ns and %.1f words per added layer@." kind
            ((last.ns_per_msg -. first.ns_per_msg) /. dl)
            ((last.words_per_msg -. first.words_per_msg) /. dl))
    [ "pass"; "seq" ]

let to_json rows =
  "["
  ^ String.concat ","
      (List.map
         (fun r ->
           Printf.sprintf "{\"kind\":%S,\"layers\":%d,\"ns_per_msg\":%.1f,\"words_per_msg\":%.1f}"
             r.kind r.layers r.ns_per_msg r.words_per_msg)
         rows)
  ^ "]"
