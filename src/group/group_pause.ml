(* Pauses of this process (its periodic work late), and what it learns
   after one: a view that went on without it. *)

open Consort

type t = {
  merge_timeout : Time.t;
  mutable last_tick : Time.t; (* when the periodic work last ran *)
  mutable resumed_at : Time.t option;
      (* when this process last ran again after a pause longer than
         group.merge_timeout (its periodic work that late) *)
  mutable dead_view : (Time.t * string) option;
      (* when and how this member learnt, after a pause, that its view
         went on without it: casts are refused until it is in a view with
         others again, for two merge timeouts at most *)
}

let create ~merge_timeout = { merge_timeout; last_tick = 0; resumed_at = None; dead_view = None }

let tick t ~now =
  if t.last_tick > 0 && now - t.last_tick > t.merge_timeout then t.resumed_at <- Some now;
  t.last_tick <- now

let recently_resumed t ~now =
  match t.resumed_at with Some r -> now - r <= 2 * t.merge_timeout | None -> false

let dead_view t ~now why = t.dead_view <- Some (now, why)
let installed t ~size = if size > 1 then t.dead_view <- None

let refusal t ~now =
  match t.dead_view with
  | Some (at, why) when now - at <= 2 * t.merge_timeout -> Some why
  | Some _ | None -> None
