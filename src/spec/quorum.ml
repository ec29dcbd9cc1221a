type violation =
  | No_decision of { member : string; line : int; view : string }
  | Misplaced of { member : string; line : int; view : string }
  | Wrong_decision of {
      member : string;
      line : int;
      view : string;
      primary : bool;
      votes : int;
      expected_votes : int;
    }
  | Cast_outside of { member : string; line : int; view : string; seq : int }
  | Concurrent of { a : string; b : string }
  | Same_time of { a : string; b : string }
  | Not_carried of { view : string; next : string; from : string; seq : int }
  | Not_rejoined of { member : string; view : string }
  | Unconfirmed of { member : string; line : int; view : string; absent : string }

let pp_violation ppf = function
  | No_decision { member; line; view } ->
      Fmt.pf ppf "%s (line %d) installed view %s and logged no quorum decision" member line view
  | Misplaced { member; line; view } ->
      Fmt.pf ppf "%s (line %d): a quorum decision on %s that does not follow its view line" member
        line view
  | Wrong_decision { member; line; view; primary; votes; expected_votes } ->
      Fmt.pf ppf "%s (line %d) says view %s is %sprimary with %d votes; its members have %d" member
        line view
        (if primary then "" else "not ")
        votes expected_votes
  | Cast_outside { member; line; view; seq } ->
      Fmt.pf ppf "%s (line %d) cast #%d in view %s, which is not primary" member line seq view
  | Concurrent { a; b } ->
      Fmt.pf ppf
        "primary views %s and %s share no member that installed both: two primaries at once" a b
  | Same_time { a; b } -> Fmt.pf ppf "primary views %s and %s have the same logical time" a b
  | Not_carried { view; next; from; seq } ->
      Fmt.pf ppf
        "primary view %s has no member that installed %s, the primary before it, and delivered \
         there %s#%d, delivered there before a flush"
        next view from seq
  | Not_rejoined { member; view } ->
      Fmt.pf ppf "%s is alive at the end in view %s, which is not primary" member view
  | Unconfirmed { member; line; view; absent } ->
      Fmt.pf ppf
        "%s (line %d) says view %s is primary, but %s, one of its members, never installed it"
        member line view absent

let ltime v =
  match String.index_opt v ':' with Some i -> int_of_string_opt (String.sub v 0 i) | None -> None

type mview = { got : (string * int, unit) Hashtbl.t; mutable blocked : bool }

let max_violations = 1000

let check ?(live_quorum = false) ?(dynamic = false) ~votes ~needed logs =
  let vs = ref [] and nv = ref 0 in
  let report v =
    if !nv < max_violations then begin
      incr nv;
      vs := v :: !vs
    end
  in
  let memberships = Hashtbl.create 64 and primary = Hashtbl.create 64 in
  let by = Hashtbl.create 64 (* (member, view) -> mview *) and installers = Hashtbl.create 64 in
  let pre =
    Hashtbl.create 64
    (* view -> casts delivered before a flush *)
  in
  let given = Hashtbl.create 16 in
  let confirmed = ref [] (* (member, line, view, members): said primary *) and finals = ref [] in
  List.iter
    (fun (member, evs) ->
      if not (Hashtbl.mem given member) then begin
        Hashtbl.replace given member ();
        (* The current view, its line, and this member's decision on it. *)
        let cur = ref None and decided = ref None in
        let undecided () =
          match (!cur, !decided) with
          | Some (v, vline), None -> report (No_decision { member; line = vline; view = v })
          | _ -> ()
        in
        List.iteri
          (fun i (e : Log.event) ->
            let line = i + 1 in
            match e with
            | Log.View { view; members; _ } ->
                undecided ();
                if not (Hashtbl.mem memberships view) then Hashtbl.replace memberships view members;
                Hashtbl.replace installers view
                  (member :: Option.value ~default:[] (Hashtbl.find_opt installers view));
                Hashtbl.replace by (member, view) { got = Hashtbl.create 32; blocked = false };
                cur := Some (view, line);
                decided := None
            | Log.Quorum { view; primary = p; votes = n; _ } -> (
                match (!cur, !decided) with
                | Some (v, _), None when v = view ->
                    decided := Some p;
                    let members = Option.value ~default:[] (Hashtbl.find_opt memberships view) in
                    let expected_votes = List.fold_left (fun acc m -> acc + votes m) 0 members in
                    if (not dynamic) && ((p && expected_votes < needed) || n <> expected_votes) then
                      report
                        (Wrong_decision
                           { member; line; view; primary = p; votes = n; expected_votes });
                    if p then begin
                      Hashtbl.replace primary view true;
                      confirmed := (member, line, view, members) :: !confirmed
                    end
                    else if not (Hashtbl.mem primary view) then Hashtbl.replace primary view false
                | _ -> report (Misplaced { member; line; view }))
            | Log.Cast { view; seq; _ } ->
                if !decided <> Some true then report (Cast_outside { member; line; view; seq })
            | Log.Block { view; _ } ->
                Option.iter (fun mv -> mv.blocked <- true) (Hashtbl.find_opt by (member, view))
            | Log.Deliver { view; from; kind = `Cast; seq; _ } -> (
                match Hashtbl.find_opt by (member, view) with
                | Some mv ->
                    Hashtbl.replace mv.got (from, seq) ();
                    if not mv.blocked then begin
                      let l = Option.value ~default:[] (Hashtbl.find_opt pre view) in
                      Hashtbl.replace pre view ((from, seq) :: l)
                    end
                | None -> ())
            | Log.Live _ ->
                undecided ();
                Option.iter (fun (v, _) -> finals := (member, v) :: !finals) !cur
            | _ -> ())
          evs
      end)
    logs;
  let is_primary v = Option.value ~default:false (Hashtbl.find_opt primary v) in
  (* Primary at a member only once every member installed it. *)
  List.iter
    (fun (member, line, view, members) ->
      List.iter
        (fun m ->
          if
            Hashtbl.mem given m
            && not (List.mem m (Option.value ~default:[] (Hashtbl.find_opt installers view)))
          then report (Unconfirmed { member; line; view; absent = m }))
        members)
    (List.rev !confirmed);
  let primaries =
    Hashtbl.fold
      (fun v p acc -> if p then (Option.value ~default:(-1) (ltime v), v) :: acc else acc)
      primary []
    |> List.sort compare
  in
  let inst v = Option.value ~default:[] (Hashtbl.find_opt installers v) in
  (* Any two primary views share a member that installed both (so one
     came before the other there: Vsync checks that a member's views
     increase), and have distinct logical times: never two at once. *)
  let share a b = List.exists (fun m -> List.mem m (inst b)) (inst a) in
  let rec pairs = function
    | [] -> ()
    | (la, a) :: rest when dynamic ->
        (match rest with
        | (lb, b) :: _ ->
            if la = lb then report (Same_time { a; b })
            else if not (share a b) then report (Concurrent { a; b })
        | [] -> ());
        pairs rest
    | (la, a) :: rest ->
        List.iter
          (fun (lb, b) ->
            if la = lb then report (Same_time { a; b })
            else if not (share a b) then report (Concurrent { a; b }))
          rest;
        pairs rest
  in
  pairs primaries;
  let rec seq = function
    | (_, p) :: ((_, q) :: _ as rest) ->
        let served = List.sort_uniq compare (Option.value ~default:[] (Hashtbl.find_opt pre p)) in
        let carriers = List.filter (fun m -> List.mem m (inst p)) (inst q) in
        let holds m =
          match Hashtbl.find_opt by (m, p) with
          | Some mv -> List.for_all (fun c -> Hashtbl.mem mv.got c) served
          | None -> false
        in
        if carriers <> [] && not (List.exists holds carriers) then begin
          (* Name a cast the first carrier lacks. *)
          let m = List.hd carriers in
          let lacks =
            List.find_opt
              (fun c ->
                match Hashtbl.find_opt by (m, p) with
                | Some mv -> not (Hashtbl.mem mv.got c)
                | None -> true)
              served
          in
          match lacks with
          | Some (from, sq) -> report (Not_carried { view = p; next = q; from; seq = sq })
          | None -> ()
        end;
        seq rest
    | _ -> ()
  in
  seq primaries;
  if live_quorum then
    List.iter
      (fun (member, v) -> if not (is_primary v) then report (Not_rejoined { member; view = v }))
      (List.rev !finals);
  if !vs = [] then Ok () else Error (List.rev !vs)
