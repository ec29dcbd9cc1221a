(* What the group runtime counts, and the counters of the stacks of
   earlier views. *)

type t = {
  mutable views : int;
  mutable sent : int;
  mutable delivered : int;
  mutable copies : int;
  mutable copied_bytes : int;
  mutable dropped_sends : int;
  mutable send_errors : int;
  mutable garbage : int;
  mutable side_misdirected : int;
  mutable past : (string * (string * int) list) list;
}

let create () =
  {
    views = 0;
    sent = 0;
    delivered = 0;
    copies = 0;
    copied_bytes = 0;
    dropped_sends = 0;
    send_errors = 0;
    garbage = 0;
    side_misdirected = 0;
    past = [];
  }

(* Counters summed layer by layer, name by name, in first-seen order. *)
let add a b =
  let add_kv kvs (k, v) =
    if List.mem_assoc k kvs then
      List.map (fun (k', v') -> if k' = k then (k', v' + v) else (k', v')) kvs
    else kvs @ [ (k, v) ]
  in
  List.fold_left
    (fun acc (layer, kvs) ->
      match List.assoc_opt layer acc with
      | None -> acc @ [ (layer, kvs) ]
      | Some old ->
          List.map
            (fun (l, k) -> if l = layer then (l, List.fold_left add_kv old kvs) else (l, k))
            acc)
    a b

(* Bottom's counters are all drops by reason; other layers' include
   gauges of the view (a window, a round), which do not add up. *)
let stack_stopped t counters =
  t.past <- add t.past (List.filter (fun (l, _) -> l = "bottom") counters)

let with_past t cur =
  if List.mem_assoc "bottom" cur then
    List.map
      (fun (l, kvs) ->
        if l = "bottom" then (l, List.assoc l (add t.past [ (l, kvs) ])) else (l, kvs))
      cur
  else cur @ t.past

(* A stack's counters, the fused path's ("fused", names without spaces) last. *)
let of_stack st =
  let fused =
    List.map
      (fun (k, v) -> (String.map (function ' ' -> '_' | c -> c) k, v))
      (("on", Bool.to_int (Consort.Stack.fused st)) :: Consort.Stack.fused_counters st)
  in
  Consort.Stack.counters st @ [ ("fused", fused) ]

let report t ~garbage ~refused ~no_view_key ~migration ~bundle cur =
  ( "group",
    [
      ("views", t.views);
      ("side_garbage", garbage);
      ("side_misdirected", t.side_misdirected);
      ("refused", refused);
      ("dropped_sends", t.dropped_sends);
      ("send_errors", t.send_errors);
      ("no_view_key", no_view_key);
    ]
    @ migration
    @ [ ("sent", t.sent); ("delivered", t.delivered) ] )
  :: ("bundle", bundle) :: with_past t cur
