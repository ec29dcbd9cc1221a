type event =
  | View of { view : string }
  | Apply of { view : string; key : string }
  | Take of { base : string }
  | Install of { base : string; keys : string list }
  | Final of { view : string; keys : string list }

module S = Set.Make (String)

(* The state of [trace] at the moment it installed [view]. *)
let state_at trace view =
  let rec go st = function
    | [] -> None
    | View { view = v } :: _ when v = view -> Some st
    | Apply { key; _ } :: rest -> go (S.add key st) rest
    | Install { keys; _ } :: rest -> go (S.of_list keys) rest
    | _ :: rest -> go st rest
  in
  go S.empty trace

let show s =
  let l = S.elements s in
  let n = List.length l in
  if n <= 4 then "{" ^ String.concat ", " l ^ "}"
  else Printf.sprintf "{%s, ... (%d)}" (String.concat ", " (List.filteri (fun i _ -> i < 4) l)) n

let check traces =
  let problems = ref [] in
  let problem fmt = Printf.ksprintf (fun s -> problems := s :: !problems) fmt in
  let finals = ref [] in
  List.iter
    (fun (me, trace) ->
      (* The index of each view in this member's order of installation. *)
      let index = Hashtbl.create 8 in
      List.iter
        (function
          | View { view } ->
              if not (Hashtbl.mem index view) then Hashtbl.replace index view (Hashtbl.length index)
          | _ -> ())
        trace;
      let idx v = Option.value ~default:(-1) (Hashtbl.find_opt index v) in
      let st = ref S.empty in
      (* The base of the snapshot last installed, by index. *)
      let floor = ref (-1) in
      List.iteri
        (fun i ev ->
          match ev with
          | View _ -> ()
          | Apply { view; key } ->
              if idx view < 0 then
                problem "%s applied %s, delivered in view %s it never installed" me key view
              else if idx view < !floor then
                problem
                  "%s applied %s of view %s after installing a state that already holds that view"
                  me key view;
              (* A later install of an earlier or equal base is checked below. *)
              st := S.add key !st
          | Take _ -> ()
          | Install { base; keys } ->
              let b = idx base in
              if b < 0 then problem "%s installed a state of view %s it never installed" me base
              else begin
                List.iteri
                  (fun j ev' ->
                    match ev' with
                    | Apply { view; key } when j < i && idx view >= b && b >= 0 ->
                        problem "%s applied %s of view %s before installing the state of view %s" me
                          key view base
                    | _ -> ())
                  trace;
                floor := b
              end;
              let got = S.of_list keys in
              st := got;
              let takers =
                List.filter
                  (fun (_, tr) ->
                    List.exists (function Take { base = b } -> b = base | _ -> false) tr)
                  traces
              in
              if takers = [] then
                problem "%s installed a state of view %s that no member took" me base;
              List.iter
                (fun (giver, gt) ->
                  match state_at gt base with
                  | None -> problem "%s took a state of view %s it never installed" giver base
                  | Some want ->
                      if not (S.equal want got) then
                        problem
                          "%s installed a state of view %s that is not the replay of the \
                           deliveries of %s, which took it: %s missing, %s extra"
                          me base giver
                          (show (S.diff want got))
                          (show (S.diff got want)))
                takers
          | Final { view; keys } ->
              let got = S.of_list keys in
              if not (S.equal got !st) then
                problem
                  "%s ends with a state that is not the replay of its trace: %s missing, %s extra"
                  me
                  (show (S.diff !st got))
                  (show (S.diff got !st));
              finals := (view, me, got) :: !finals)
        trace)
    traces;
  let by_view = Hashtbl.create 8 in
  List.iter
    (fun (v, me, s) ->
      Hashtbl.replace by_view v ((me, s) :: Option.value ~default:[] (Hashtbl.find_opt by_view v)))
    !finals;
  Hashtbl.iter
    (fun v l ->
      match l with
      | (m0, s0) :: rest ->
          List.iter
            (fun (m, s) ->
              if not (S.equal s s0) then
                problem
                  "%s and %s end in view %s with different states: %s only at %s, %s only at %s" m0
                  m v
                  (show (S.diff s0 s))
                  m0
                  (show (S.diff s s0))
                  m)
            rest
      | [] -> ())
    by_view;
  List.rev !problems

let normalize events =
  let index = Hashtbl.create 8 in
  let cur = ref (-1) in
  let keyed =
    List.mapi
      (fun i (e : Log.event) ->
        let k =
          match e with
          | Log.View { view; _ } ->
              let k = Hashtbl.length index in
              if not (Hashtbl.mem index view) then Hashtbl.replace index view k;
              cur := Hashtbl.find index view;
              !cur
          | Log.Deliver { view; _ } -> (
              match Hashtbl.find_opt index view with Some k -> k | None -> !cur)
          | _ -> !cur
        in
        ((k, i), e))
      events
  in
  List.map snd (List.stable_sort (fun (a, _) (b, _) -> compare a b) keyed)
