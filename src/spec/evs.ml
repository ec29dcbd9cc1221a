type cast = { from : string; seq : int }

type violation =
  | No_transitional of { member : string; line : int; view : string; next : string }
  | Misplaced of { member : string; line : int; what : string }
  | Wrong_members of {
      member : string;
      line : int;
      view : string;
      next : string;
      members : string list;
      expected : string list;
    }
  | Not_safe of { member : string; line : int; view : string; cast : cast; absent : string }
  | Not_safe_transitional of {
      member : string;
      line : int;
      view : string;
      cast : cast;
      absent : string;
    }

let pp_cast ppf c = Fmt.pf ppf "%s#%d" c.from c.seq
let pp_ids = Fmt.(brackets (list ~sep:comma string))

let pp_violation ppf = function
  | No_transitional { member; line; view; next } ->
      Fmt.pf ppf "%s (line %d) goes from view %s into %s with no transitional view" member line view
        next
  | Misplaced { member; line; what } -> Fmt.pf ppf "%s (line %d): %s" member line what
  | Wrong_members { member; line; view; next; members; expected } ->
      Fmt.pf ppf "%s (line %d): transitional view from %s into %s is %a, the members of both are %a"
        member line view next pp_ids members pp_ids expected
  | Not_safe { member; line; view; cast; absent } ->
      Fmt.pf ppf
        "%s (line %d) delivered %a in the regular part of view %s, never delivered there by %s, \
         which went on"
        member line pp_cast cast view absent
  | Not_safe_transitional { member; line; view; cast; absent } ->
      Fmt.pf ppf
        "%s (line %d) delivered %a in the transitional part of view %s, never delivered there by \
         %s, of the same transitional view, which went on"
        member line pp_cast cast view absent

(* A member's stay in a view. *)
type mview = { got : (cast, unit) Hashtbl.t; mutable went_on : bool }
type part = Regular | Transitional of string list
type delivery = { d_member : string; d_line : int; d_view : string; d_cast : cast; d_part : part }

let max_violations = 1000

let check logs =
  let vs = ref [] and nv = ref 0 in
  let report v =
    if !nv < max_violations then begin
      incr nv;
      vs := v :: !vs
    end
  in
  let by = Hashtbl.create 64 (* (member, view) -> mview *) and memberships = Hashtbl.create 64 in
  let deliveries = ref [] in
  let given = Hashtbl.create 16 in
  List.iter
    (fun (member, evs) ->
      if not (Hashtbl.mem given member) then begin
        Hashtbl.replace given member ();
        (* The current view and its members; the transitional view heard
           in it, if any (its line, next view and members). *)
        let cur = ref None and trans = ref None in
        let misplaced line what = report (Misplaced { member; line; what }) in
        List.iteri
          (fun i (e : Log.event) ->
            let line = i + 1 in
            match e with
            | Log.View { view; members; _ } ->
                if not (Hashtbl.mem memberships view) then Hashtbl.replace memberships view members;
                (match !cur with
                | Some (v, old_members) when v <> view -> (
                    Option.iter (fun mv -> mv.went_on <- true) (Hashtbl.find_opt by (member, v));
                    match !trans with
                    | None -> report (No_transitional { member; line; view = v; next = view })
                    | Some (tline, None, _) ->
                        misplaced tline
                          (Fmt.str "transitional view of a leave, then installs %s" view)
                    | Some (tline, Some next, tmembers) ->
                        if next <> view then
                          misplaced tline
                            (Fmt.str "transitional view into %s, then installs %s" next view)
                        else
                          let expected = List.filter (fun m -> List.mem m members) old_members in
                          if tmembers <> expected then
                            report
                              (Wrong_members
                                 {
                                   member;
                                   line = tline;
                                   view = v;
                                   next;
                                   members = tmembers;
                                   expected;
                                 }))
                | _ ->
                    Option.iter
                      (fun (tline, _, _) -> misplaced tline "transitional view before a first view")
                      !trans);
                trans := None;
                cur := Some (view, members);
                if not (Hashtbl.mem by (member, view)) then
                  Hashtbl.replace by (member, view) { got = Hashtbl.create 32; went_on = false }
            | Log.Trans { view; next; members; _ } -> (
                match (!cur, !trans) with
                | None, _ -> misplaced line "transitional view before any view"
                | Some _, Some (first, _, _) ->
                    misplaced line
                      (Fmt.str "a second transitional view (the first at line %d)" first)
                | Some (v, _), None ->
                    if v <> view then
                      misplaced line (Fmt.str "transitional view of %s in view %s" view v)
                    else if not (List.mem member members) then
                      misplaced line
                        (Fmt.str "transitional view %a without its member" pp_ids members)
                    else if next = None && members <> [ member ] then
                      misplaced line
                        (Fmt.str "transitional view of a leave with %a, not the member alone" pp_ids
                           members)
                    else trans := Some (line, next, members))
            | Log.Deliver { view; from; kind = `Cast; seq; _ } -> (
                match !cur with
                | Some (v, _) when v = view ->
                    let c = { from; seq } in
                    Option.iter
                      (fun mv -> Hashtbl.replace mv.got c ())
                      (Hashtbl.find_opt by (member, view));
                    let part =
                      match !trans with Some (_, _, m) -> Transitional m | None -> Regular
                    in
                    deliveries :=
                      { d_member = member; d_line = line; d_view = view; d_cast = c; d_part = part }
                      :: !deliveries
                | _ -> ())
            | Log.Live _ -> (
                (match !cur with
                | Some (v, _) ->
                    Option.iter (fun mv -> mv.went_on <- true) (Hashtbl.find_opt by (member, v))
                | None -> ());
                match !trans with
                | Some _ -> misplaced line "a live line after a transitional view"
                | None -> ())
            | Log.Cast _ | Log.Send _ | Log.Block _ | Log.Refused _ -> (
                match !trans with
                | Some (tline, _, _) ->
                    misplaced line
                      (Fmt.str "not a delivery, after the transitional view at line %d" tline)
                | None -> ())
            | Log.Deliver _ | Log.Lost _ | Log.Exit _ | Log.Quorum _ -> ())
          evs
      end)
    logs;
  List.iter
    (fun d ->
      let must, mk =
        match d.d_part with
        | Regular ->
            ( Option.value ~default:[] (Hashtbl.find_opt memberships d.d_view),
              fun absent ->
                Not_safe
                  { member = d.d_member; line = d.d_line; view = d.d_view; cast = d.d_cast; absent }
            )
        | Transitional m ->
            ( m,
              fun absent ->
                Not_safe_transitional
                  { member = d.d_member; line = d.d_line; view = d.d_view; cast = d.d_cast; absent }
            )
      in
      List.iter
        (fun m ->
          if m <> d.d_member then
            match Hashtbl.find_opt by (m, d.d_view) with
            | Some mv when mv.went_on && not (Hashtbl.mem mv.got d.d_cast) -> report (mk m)
            | _ -> ())
        must)
    (List.rev !deliveries);
  if !vs = [] then Ok () else Error (List.rev !vs)
