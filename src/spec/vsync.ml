type violation =
  | Duplicate_log of { member : string }
  | Foreign_event of { member : string; line : int; me : string }
  | No_view of { member : string; line : int }
  | After_exit of { member : string; line : int }
  | After_live of { member : string; line : int }
  | Not_current_view of { member : string; line : int; view : string; current : string }
  | Bad_view_id of { member : string; line : int; view : string }
  | Reinstalled of { member : string; line : int; view : string; first : int }
  | Not_increasing of { member : string; line : int; view : string; previous : string }
  | Not_in_own_view of { member : string; line : int; view : string; members : string list }
  | Repeated_member of { member : string; line : int; view : string; id : string }
  | Membership_disagrees of {
      member : string;
      line : int;
      view : string;
      members : string list;
      other : string;
      other_members : string list;
    }
  | Duplicate_id of { member : string; line : int; seq : int; first : int }
  | Sent_while_blocked of { member : string; line : int; view : string; seq : int; block : int }
  | Sender_log_missing of { from : string; member : string; line : int; seq : int; count : int }
  | Not_sent of { member : string; line : int; view : string; from : string; seq : int }
  | Delivered_refused of { member : string; line : int; from : string; seq : int; refused : int }
  | Delivered_before_sent of { member : string; line : int; seq : int; sent : int }
  | Wrong_kind of { member : string; line : int; from : string; seq : int; kind : Log.kind }
  | Misaddressed of { member : string; line : int; from : string; seq : int; dst : string }
  | Wrong_length of { member : string; line : int; from : string; seq : int; len : int; sent : int }
  | Wrong_digest of {
      member : string;
      line : int;
      from : string;
      seq : int;
      digest : string;
      sent : string;
    }
  | Outsider of { member : string; line : int; view : string; from : string; seq : int }
  | Wrong_view of {
      member : string;
      line : int;
      view : string;
      from : string;
      seq : int;
      sent : string;
    }
  | Duplicate of { member : string; line : int; from : string; seq : int; first : int }
  | Out_of_order of {
      member : string;
      line : int;
      view : string;
      from : string;
      seq : int;
      after : int;
    }
  | Gap of {
      member : string;
      line : int;
      view : string;
      from : string;
      kind : Log.kind;
      seq : int;
      missing : int;
    }
  | Not_synchronous of {
      view : string;
      next : string;
      from : string;
      seq : int;
      delivered : string list;
      missing : string list;
    }
  | Not_delivered of {
      view : string;
      next : string option;
      from : string;
      seq : int;
      missing : string list;
    }
  | Not_merged of { finals : (string * string list) list }
  | Ended_blocked of { member : string; view : string; block : int }
  | Casts_unaccounted of { member : string; accepted : int; accounted : int }
  | Wedged of { member : string; line : int; view : string; seq : int }
  | Live_apart of { finals : (string * string list) list }

(* Lists without break hints: a violation is one line. *)
let pp_ids ppf l = Fmt.pf ppf "[%s]" (String.concat "; " l)
let pp_at ppf (member, line) = Fmt.pf ppf "[%s] line %d:" member line

let pp_finals ppf finals =
  Fmt.string ppf
    (String.concat "; " (List.map (fun (v, ms) -> Fmt.str "%s has %a" v pp_ids ms) finals))

let pp_violation ppf = function
  | Duplicate_log { member } ->
      Fmt.pf ppf "[%s] more than one log given for this member; only the first is checked" member
  | Foreign_event { member; line; me } ->
      Fmt.pf ppf "%a event of member %s in this member's log" pp_at (member, line) me
  | No_view { member; line } ->
      Fmt.pf ppf "%a message event before any view was installed" pp_at (member, line)
  | After_exit { member; line } -> Fmt.pf ppf "%a event after the member's exit" pp_at (member, line)
  | After_live { member; line } ->
      Fmt.pf ppf "%a event after the member's live line, which ends its log" pp_at (member, line)
  | Not_current_view { member; line; view; current } ->
      Fmt.pf ppf "%a event in view %s, but the current view is %s" pp_at (member, line) view current
  | Bad_view_id { member; line; view } ->
      Fmt.pf ppf "%a view id %S is not of the form LTIME:COORD" pp_at (member, line) view
  | Reinstalled { member; line; view; first } ->
      Fmt.pf ppf "%a installs view %s again (first at line %d)" pp_at (member, line) view first
  | Not_increasing { member; line; view; previous } ->
      Fmt.pf ppf "%a installs view %s after view %s, whose LTIME is not lower" pp_at (member, line)
        view previous
  | Not_in_own_view { member; line; view; members } ->
      Fmt.pf ppf "%a installs view %s = %a, which it is not in" pp_at (member, line) view pp_ids
        members
  | Repeated_member { member; line; view; id } ->
      Fmt.pf ppf "%a view %s lists member %s more than once" pp_at (member, line) view id
  | Membership_disagrees { member; line; view; members; other; other_members } ->
      Fmt.pf ppf "%a view %s is %a here, but %a at %s" pp_at (member, line) view pp_ids members
        pp_ids other_members other
  | Duplicate_id { member; line; seq; first } ->
      Fmt.pf ppf "%a uses message id %s#%d again (first at line %d)" pp_at (member, line) member seq
        first
  | Sent_while_blocked { member; line; view; seq; block } ->
      Fmt.pf ppf "%a sends message %d in view %s after its block at line %d, before the next view"
        pp_at (member, line) seq view block
  | Sender_log_missing { from; member; line; seq; count } ->
      Fmt.pf ppf
        "no log of %s, whose messages were delivered %d time(s) (first: message %d at [%s] line %d)"
        from count seq member line
  | Not_sent { member; line; view; from; seq } ->
      Fmt.pf ppf "%a delivers message %d of %s in view %s, which %s never sent" pp_at (member, line)
        seq from view from
  | Delivered_refused { member; line; from; seq; refused } ->
      Fmt.pf ppf "%a delivers message %d of %s, which the API refused (at %s's line %d)" pp_at
        (member, line) seq from from refused
  | Delivered_before_sent { member; line; seq; sent } ->
      Fmt.pf ppf "%a delivers its own message %d before sending it (at line %d)" pp_at
        (member, line) seq sent
  | Wrong_kind { member; line; from; seq; kind } ->
      Fmt.pf ppf "%a delivers message %d of %s as a %a, but it was not sent as one" pp_at
        (member, line) seq from Log.pp_kind kind
  | Misaddressed { member; line; from; seq; dst } ->
      Fmt.pf ppf "%a delivers message %d of %s, which was sent to %s" pp_at (member, line) seq from
        dst
  | Wrong_length { member; line; from; seq; len; sent } ->
      Fmt.pf ppf "%a delivers message %d of %s with length %d, but it was sent with length %d" pp_at
        (member, line) seq from len sent
  | Wrong_digest { member; line; from; seq; digest; sent } ->
      Fmt.pf ppf "%a delivers message %d of %s with digest %s, but it was sent with digest %s" pp_at
        (member, line) seq from digest sent
  | Outsider { member; line; view; from; seq } ->
      Fmt.pf ppf "%a delivers message %d of %s in view %s, which %s is not in" pp_at (member, line)
        seq from view from
  | Wrong_view { member; line; view; from; seq; sent } ->
      Fmt.pf ppf "%a delivers message %d of %s in view %s, but it was sent in view %s" pp_at
        (member, line) seq from view sent
  | Duplicate { member; line; from; seq; first } ->
      Fmt.pf ppf "%a delivers message %d of %s again (first at line %d)" pp_at (member, line) seq
        from first
  | Out_of_order { member; line; view; from; seq; after } ->
      Fmt.pf ppf "%a delivers message %d of %s in view %s after %d, which %s sent later" pp_at
        (member, line) seq from view after from
  | Gap { member; line; view; from; kind; seq; missing } ->
      Fmt.pf ppf
        "%a delivers %a %d of %s in view %s but never delivers its earlier %a %d of that view (a \
         gap)"
        pp_at (member, line) Log.pp_kind kind seq from view Log.pp_kind kind missing
  | Not_synchronous { view; next; from; seq; delivered; missing } ->
      Fmt.pf ppf
        "views %s then %s: message %d of %s delivered in %s by %a but not by %a, which stay with \
         them"
        view next seq from view pp_ids delivered pp_ids missing
  | Not_delivered { view; next = Some next; from; seq; missing } ->
      Fmt.pf ppf "views %s then %s: message %d of %s not delivered in %s by %a, which stay with %s"
        view next seq from view pp_ids missing from
  | Not_delivered { view; next = None; from; seq; missing } ->
      Fmt.pf ppf
        "final view %s: message %d of %s not delivered by %a, though all are alive at the end" view
        seq from pp_ids missing
  | Not_merged { finals } ->
      Fmt.pf ppf "members alive at the end are in %d views: %a" (List.length finals) pp_finals
        finals
  | Ended_blocked { member; view; block } ->
      Fmt.pf ppf
        "[%s] is live at the end but still blocked in view %s (block at line %d, no view after it)"
        member view block
  | Casts_unaccounted { member; accepted; accounted } when accounted < accepted ->
      Fmt.pf ppf "[%s] the API accepted %d casts, but only %d were sent or reported lost: %d wedged"
        member accepted accounted (accepted - accounted)
  | Casts_unaccounted { member; accepted; accounted } ->
      Fmt.pf ppf "[%s] the API accepted %d casts, but %d were sent or reported lost" member accepted
        accounted
  | Wedged { member; line; view; seq } ->
      Fmt.pf ppf
        "%a cast %d in view %s is neither delivered by its live sender nor reported lost (a wedge)"
        pp_at (member, line) seq view
  | Live_apart { finals } ->
      Fmt.pf ppf "live, connected members end in %d views: %a" (List.length finals) pp_finals finals

(* Per member, the events of the log grouped by install: a span is the
   part of the log from one view install to the next. *)

type span = {
  vid : string;
  members : string list;
  at : int; (* line of the install *)
  mutable casts : int list; (* seqs cast in the span, latest first *)
  mutable sends : (string * int) list; (* (dst, seq) sent, latest first *)
  got : (string * int, unit) Hashtbl.t; (* (from, seq) delivered in the span *)
  mutable got_casts : (string * int) list; (* cast deliveries, latest first *)
  (* per (from, is a cast): the latest in send order of the messages of
     [from] sent in this view and delivered here: sender's line, seq, line
     of the delivery *)
  top : (string * bool, int * int * int) Hashtbl.t;
}

type sent = { s_line : int; s_span : int; s_dst : string option; s_len : int; s_digest : string }

type delivery = {
  d_line : int;
  d_span : int;
  d_from : string;
  d_seq : int;
  d_kind : Log.kind;
  d_len : int;
  d_digest : string;
}

type member = {
  id : string;
  spans : span array;
  exited : bool;
  sent : (int, sent) Hashtbl.t; (* by seq *)
  refused : (int, int) Hashtbl.t; (* seq -> line *)
  lost : (int, Log.kind) Hashtbl.t;
  deliveries : delivery list; (* in log order *)
  blocked_at_end : int option; (* line of a block after the last view *)
  live : (int * int) option; (* line, casts accepted *)
}

(* "LTIME:COORD" with LTIME decimal digits and COORD non-empty. *)
let ltime vid =
  match String.index_opt vid ':' with
  | Some i when i > 0 && i <= 18 && i < String.length vid - 1 ->
      let t = String.sub vid 0 i in
      if String.for_all (function '0' .. '9' -> true | _ -> false) t then Some (int_of_string t)
      else None
  | _ -> None

(* Walks one log: checks what one member's log says alone, and groups its
   events by span. *)
let scan report id events =
  let spans = ref [] and nspans = ref 0 in
  let installed = Hashtbl.create 16 in
  let last_ltime = ref None in
  let exited = ref false and live = ref None in
  let blocked = ref None in
  let sent = Hashtbl.create 256 and refused = Hashtbl.create 8 and lost = Hashtbl.create 8 in
  let deliveries = ref [] in
  let current () = match !spans with [] -> None | s :: _ -> Some (s, !nspans - 1) in
  let in_view line view k =
    match current () with
    | None -> report (No_view { member = id; line })
    | Some (s, i) ->
        if view <> s.vid then report (Not_current_view { member = id; line; view; current = s.vid });
        k s i
  in
  let fresh_id line seq =
    match (Hashtbl.find_opt sent seq, Hashtbl.find_opt refused seq) with
    | Some first, _ ->
        report (Duplicate_id { member = id; line; seq; first = first.s_line });
        false
    | None, Some first ->
        report (Duplicate_id { member = id; line; seq; first });
        false
    | None, None -> true
  in
  let record_sent line view seq span dst len digest =
    (match !blocked with
    | Some block -> report (Sent_while_blocked { member = id; line; view; seq; block })
    | None -> ());
    let fresh = fresh_id line seq in
    if fresh then
      Hashtbl.add sent seq
        { s_line = line; s_span = span; s_dst = dst; s_len = len; s_digest = digest };
    fresh
  in
  List.iteri
    (fun i e ->
      let line = i + 1 in
      let me = Log.me e in
      if me <> id then report (Foreign_event { member = id; line; me });
      if !exited then report (After_exit { member = id; line })
      else if !live <> None then report (After_live { member = id; line })
      else
        match e with
        | Log.View { view; members; _ } ->
            (match ltime view with
            | None -> report (Bad_view_id { member = id; line; view })
            | Some t -> (
                match !last_ltime with
                | Some (t', previous) when t <= t' && not (Hashtbl.mem installed view) ->
                    report (Not_increasing { member = id; line; view; previous })
                | Some (t', _) when t <= t' -> ()
                | _ -> last_ltime := Some (t, view)));
            (match Hashtbl.find_opt installed view with
            | Some first -> report (Reinstalled { member = id; line; view; first })
            | None -> Hashtbl.add installed view line);
            if not (List.mem id members) then
              report (Not_in_own_view { member = id; line; view; members });
            let seen = Hashtbl.create 8 in
            List.iter
              (fun m ->
                if Hashtbl.mem seen m then
                  report (Repeated_member { member = id; line; view; id = m })
                else Hashtbl.add seen m ())
              members;
            blocked := None;
            spans :=
              {
                vid = view;
                members;
                at = line;
                casts = [];
                sends = [];
                got = Hashtbl.create 64;
                got_casts = [];
                top = Hashtbl.create 8;
              }
              :: !spans;
            incr nspans
        | Log.Cast { view; seq; len; digest; _ } ->
            in_view line view (fun s si ->
                if record_sent line view seq si None len digest then s.casts <- seq :: s.casts)
        | Log.Send { view; dst; seq; len; digest; _ } ->
            in_view line view (fun s si ->
                if record_sent line view seq si (Some dst) len digest then
                  s.sends <- (dst, seq) :: s.sends)
        | Log.Deliver { view; from; kind; seq; len; digest; _ } ->
            in_view line view (fun _ si ->
                let d =
                  {
                    d_line = line;
                    d_span = si;
                    d_from = from;
                    d_seq = seq;
                    d_kind = kind;
                    d_len = len;
                    d_digest = digest;
                  }
                in
                deliveries := d :: !deliveries)
        | Log.Block { view; _ } ->
            in_view line view (fun _ _ -> if !blocked = None then blocked := Some line)
        | Log.Refused { view; seq; _ } ->
            in_view line view (fun _ _ -> if fresh_id line seq then Hashtbl.add refused seq line)
        | Log.Lost { seq; kind; _ } -> Hashtbl.replace lost seq kind
        | Log.Exit _ -> exited := true
        | Log.Live { casts; _ } -> live := Some (line, casts)
        | Log.Trans { view; _ } | Log.Quorum { view; _ } -> in_view line view (fun _ _ -> ()))
    events;
  {
    id;
    spans = Array.of_list (List.rev !spans);
    exited = !exited;
    sent;
    refused;
    lost;
    deliveries = List.rev !deliveries;
    blocked_at_end = !blocked;
    live = !live;
  }

(* Members that install [view] agree on its membership with its first
   installer. *)
let check_memberships report members =
  let first = Hashtbl.create 64 in
  List.iter
    (fun m ->
      Array.iter
        (fun s ->
          match Hashtbl.find_opt first s.vid with
          | None -> Hashtbl.add first s.vid (m.id, s.members)
          | Some (other, other_members) ->
              if s.members <> other_members then
                let member = m.id and line = s.at and view = s.vid and members = s.members in
                report (Membership_disagrees { member; line; view; members; other; other_members }))
        m.spans)
    members

(* One first delivery [d] at [r] (in [view]) of message [m] of [s]: kind,
   address, length, digest, view, and FIFO order. The span's [top] keeps,
   per (sender, kind), the latest message in send order delivered so far. *)
let check_against_sender report r d ~span s m =
  let member = r.id and line = d.d_line and from = d.d_from and seq = d.d_seq in
  let view = span.vid in
  if from = member && m.s_line > line then
    report (Delivered_before_sent { member; line; seq; sent = m.s_line });
  let ok_kind =
    match (m.s_dst, d.d_kind) with
    | None, `Cast -> true
    | Some dst, `Send ->
        if dst <> member then report (Misaddressed { member; line; from; seq; dst });
        dst = member
    | _, kind ->
        report (Wrong_kind { member; line; from; seq; kind });
        false
  in
  if m.s_len <> d.d_len then
    report (Wrong_length { member; line; from; seq; len = d.d_len; sent = m.s_len });
  if m.s_digest <> d.d_digest then
    report (Wrong_digest { member; line; from; seq; digest = d.d_digest; sent = m.s_digest });
  let sent = s.spans.(m.s_span).vid in
  if sent <> view then report (Wrong_view { member; line; view; from; seq; sent })
  else if ok_kind then
    let key = (from, d.d_kind = `Cast) in
    match Hashtbl.find_opt span.top key with
    | Some (l, after, _) when l > m.s_line ->
        report (Out_of_order { member; line; view; from; seq; after })
    | _ -> Hashtbl.replace span.top key (m.s_line, seq, line)

(* Gaps: in each span of [r], for each sender whose log is given, every
   message of that sender's view addressed to [r] and sent before the
   latest one [r] delivered there, is delivered there too. *)
let check_gaps report by_id r =
  Array.iter
    (fun span ->
      Hashtbl.fold (fun k v acc -> (k, v) :: acc) span.top []
      |> List.sort compare
      |> List.iter (fun ((from, is_cast), (top_line, top_seq, line)) ->
             match Hashtbl.find_opt by_id from with
             | None -> ()
             | Some s -> (
                 match List.find_opt (fun sp -> sp.vid = span.vid) (Array.to_list s.spans) with
                 | None -> ()
                 | Some ssp ->
                     let earlier =
                       if is_cast then List.rev ssp.casts
                       else
                         List.rev
                           (List.filter_map
                              (fun (dst, seq) -> if dst = r.id then Some seq else None)
                              ssp.sends)
                     in
                     List.iter
                       (fun seq ->
                         let m = Hashtbl.find s.sent seq in
                         if m.s_line < top_line && not (Hashtbl.mem span.got (from, seq)) then
                           report
                             (Gap
                                {
                                  member = r.id;
                                  line;
                                  view = span.vid;
                                  from;
                                  kind = (if is_cast then `Cast else `Send);
                                  seq = top_seq;
                                  missing = seq;
                                }))
                       earlier)))
    r.spans

(* Each delivery: duplication, then against its span (recorded there for
   the synchrony checks) and against the sender's log, if given. *)
let check_deliveries report by_id members =
  let absent = Hashtbl.create 8 and absent_order = ref [] in
  let no_log from r d =
    match Hashtbl.find_opt absent from with
    | Some (n, f) -> Hashtbl.replace absent from (n + 1, f)
    | None ->
        absent_order := from :: !absent_order;
        Hashtbl.add absent from (1, (r.id, d.d_line, d.d_seq))
  in
  List.iter
    (fun r ->
      let first = Hashtbl.create 256 in
      List.iter
        (fun d ->
          let member = r.id and line = d.d_line and from = d.d_from and seq = d.d_seq in
          let key = (from, seq) in
          match Hashtbl.find_opt first key with
          | Some first -> report (Duplicate { member; line; from; seq; first })
          | None -> (
              Hashtbl.add first key line;
              let span = r.spans.(d.d_span) in
              let view = span.vid in
              Hashtbl.replace span.got key ();
              if d.d_kind = `Cast then span.got_casts <- key :: span.got_casts;
              if not (List.mem from span.members) then
                report (Outsider { member; line; view; from; seq });
              match Hashtbl.find_opt by_id from with
              | None -> no_log from r d
              | Some s -> (
                  match Hashtbl.find_opt s.sent seq with
                  | Some m -> check_against_sender report r d ~span s m
                  | None -> (
                      match Hashtbl.find_opt s.refused seq with
                      | Some refused ->
                          report (Delivered_refused { member; line; from; seq; refused })
                      | None -> report (Not_sent { member; line; view; from; seq })))))
        r.deliveries;
      check_gaps report by_id r)
    members;
  List.iter
    (fun from ->
      let count, (member, line, seq) = Hashtbl.find absent from in
      report (Sender_log_missing { from; member; line; seq; count }))
    (List.rev !absent_order)

(* Groups of members staying from one view into the next, in order of first
   appearance, each with its members and their spans of the first view. *)
let transitions members =
  let groups = Hashtbl.create 64 and order = ref [] in
  List.iter
    (fun m ->
      for i = 0 to Array.length m.spans - 2 do
        let key = (m.spans.(i).vid, m.spans.(i + 1).vid) in
        match Hashtbl.find_opt groups key with
        | Some l -> l := (m, m.spans.(i)) :: !l
        | None ->
            order := key :: !order;
            Hashtbl.add groups key (ref [ (m, m.spans.(i)) ])
      done)
    members;
  List.rev_map (fun key -> (key, List.rev !(Hashtbl.find groups key))) !order

(* Every message of [s] in [span] delivered in the span of each member of
   [group] (members with their spans of the same view), unless its sender
   reported it lost. *)
let check_live report ~view ~next group =
  let ids = List.map (fun (m, _) -> m.id) group in
  List.iter
    (fun (s, span) ->
      let missing key =
        List.filter_map (fun (r, sp) -> if Hashtbl.mem sp.got key then None else Some r.id) group
      in
      List.iter
        (fun seq ->
          let key = (s.id, seq) in
          let missing = missing key in
          (* With a next view, casts delivered by some are left to the
             virtual synchrony check. *)
          let report_it =
            match next with
            | None -> missing <> []
            | Some _ -> List.length missing = List.length ids
          in
          if report_it && not (Hashtbl.mem s.lost seq) then
            report (Not_delivered { view; next; from = s.id; seq; missing }))
        (List.rev span.casts);
      List.iter
        (fun (dst, seq) ->
          match List.find_opt (fun (r, _) -> r.id = dst) group with
          | Some (_, sp) when (not (Hashtbl.mem sp.got (s.id, seq))) && not (Hashtbl.mem s.lost seq)
            ->
              report (Not_delivered { view; next; from = s.id; seq; missing = [ dst ] })
          | _ -> ())
        (List.rev span.sends))
    group

let check_synchrony report members =
  List.iter
    (fun ((view, next), group) ->
      let seen = Hashtbl.create 64 and union = ref [] in
      List.iter
        (fun (_, sp) ->
          List.iter
            (fun key ->
              if not (Hashtbl.mem seen key) then (
                Hashtbl.add seen key ();
                union := key :: !union))
            (List.rev sp.got_casts))
        group;
      List.iter
        (fun ((from, seq) as key) ->
          let delivered, missing = List.partition (fun (_, sp) -> Hashtbl.mem sp.got key) group in
          if missing <> [] then
            report
              (Not_synchronous
                 {
                   view;
                   next;
                   from;
                   seq;
                   delivered = List.map (fun (m, _) -> m.id) delivered;
                   missing = List.map (fun (m, _) -> m.id) missing;
                 }))
        (List.rev !union);
      check_live report ~view ~next:(Some next) group)
    (transitions members)

(* Members alive at the end, grouped by last view in order of first
   appearance. *)
let finals ?(crashed = []) members =
  let installers = Hashtbl.create 64 in
  List.iter
    (fun m ->
      Array.iteri
        (fun i s ->
          let l = Option.value ~default:[] (Hashtbl.find_opt installers s.vid) in
          Hashtbl.replace installers s.vid ((m, i) :: l))
        m.spans)
    members;
  let excluded m last =
    List.exists
      (fun (r, i) ->
        r.id <> m.id
        &&
        let later = ref false in
        for j = i + 1 to Array.length r.spans - 1 do
          if not (List.mem m.id r.spans.(j).members) then later := true
        done;
        !later)
      (Hashtbl.find installers last.vid)
  in
  let groups = Hashtbl.create 16 and order = ref [] in
  List.iter
    (fun m ->
      let n = Array.length m.spans in
      if n > 0 && (not m.exited) && not (List.mem m.id crashed) then begin
        let last = m.spans.(n - 1) in
        if not (excluded m last) then
          match Hashtbl.find_opt groups last.vid with
          | Some l -> l := (m, last) :: !l
          | None ->
              order := last.vid :: !order;
              Hashtbl.add groups last.vid (ref [ (m, last) ])
      end)
    members;
  List.rev_map (fun v -> (v, List.rev !(Hashtbl.find groups v))) !order

(* Members with a live line: not blocked at the end, every accepted cast
   sent or reported lost, every cast sent delivered by the sender itself or
   reported lost, and all in one last view. *)
let check_wedges report members =
  let live = List.filter (fun m -> m.live <> None) members in
  List.iter
    (fun m ->
      let n = Array.length m.spans in
      (match m.blocked_at_end with
      | Some block when n > 0 ->
          report (Ended_blocked { member = m.id; view = m.spans.(n - 1).vid; block })
      | _ -> ());
      let casts =
        Hashtbl.fold (fun seq s acc -> if s.s_dst = None then seq :: acc else acc) m.sent []
      in
      let lost_unsent =
        Hashtbl.fold
          (fun seq kind acc ->
            if kind = `Cast && (not (Hashtbl.mem m.sent seq)) && not (Hashtbl.mem m.refused seq)
            then acc + 1
            else acc)
          m.lost 0
      in
      let accepted = match m.live with Some (_, c) -> c | None -> 0 in
      let accounted = List.length casts + lost_unsent in
      if accounted <> accepted then
        report (Casts_unaccounted { member = m.id; accepted; accounted });
      List.iter
        (fun seq ->
          let s = Hashtbl.find m.sent seq in
          let delivered = Array.exists (fun sp -> Hashtbl.mem sp.got (m.id, seq)) m.spans in
          if (not delivered) && not (Hashtbl.mem m.lost seq) then
            report (Wedged { member = m.id; line = s.s_line; view = m.spans.(s.s_span).vid; seq }))
        (List.sort compare casts))
    live;
  let order = ref [] in
  List.iter
    (fun m ->
      let n = Array.length m.spans in
      if n > 0 then
        let v = m.spans.(n - 1).vid in
        match List.assoc_opt v !order with
        | Some l -> l := m.id :: !l
        | None -> order := (v, ref [ m.id ]) :: !order)
    live;
  if List.length !order > 1 then
    report (Live_apart { finals = List.rev_map (fun (v, l) -> (v, List.rev !l)) !order })

let check ?(require_merge = false) ?(quiescent = false) ?crashed logs =
  let found = ref [] in
  let report v = found := v :: !found in
  let by_id = Hashtbl.create 16 in
  let members =
    List.filter_map
      (fun (id, events) ->
        if Hashtbl.mem by_id id then (
          report (Duplicate_log { member = id });
          None)
        else
          let m = scan report id events in
          Hashtbl.add by_id id m;
          Some m)
      logs
  in
  check_memberships report members;
  check_deliveries report by_id members;
  check_synchrony report members;
  let finals = finals ?crashed members in
  if quiescent then List.iter (fun (view, group) -> check_live report ~view ~next:None group) finals;
  (if require_merge && List.length finals > 1 then
     let ids group = List.map (fun (m, _) -> m.id) group in
     report (Not_merged { finals = List.map (fun (v, group) -> (v, ids group)) finals }));
  check_wedges report members;
  match !found with [] -> Ok () | l -> Error (List.rev l)

type summary = {
  logs : int;
  members : int;
  views : int;
  installs : int;
  casts : int;
  sends : int;
  deliveries : int;
  blocks : int;
  refused : int;
  lost : int;
  exits : int;
}

let summarize logs =
  let views = Hashtbl.create 64 in
  let z =
    {
      logs = List.length logs;
      members = 0;
      views = 0;
      installs = 0;
      casts = 0;
      sends = 0;
      deliveries = 0;
      blocks = 0;
      refused = 0;
      lost = 0;
      exits = 0;
    }
  in
  let count s e =
    match e with
    | Log.View { view; _ } ->
        Hashtbl.replace views view ();
        { s with installs = s.installs + 1 }
    | Log.Cast _ -> { s with casts = s.casts + 1 }
    | Log.Send _ -> { s with sends = s.sends + 1 }
    | Log.Deliver _ -> { s with deliveries = s.deliveries + 1 }
    | Log.Block _ -> { s with blocks = s.blocks + 1 }
    | Log.Refused _ -> { s with refused = s.refused + 1 }
    | Log.Lost _ -> { s with lost = s.lost + 1 }
    | Log.Exit _ -> { s with exits = s.exits + 1 }
    | Log.Live _ | Log.Trans _ | Log.Quorum _ -> s
  in
  let s =
    List.fold_left
      (fun s (_, events) ->
        let s = if events = [] then s else { s with members = s.members + 1 } in
        List.fold_left count s events)
      z logs
  in
  { s with views = Hashtbl.length views }

let pp_summary ppf s =
  Fmt.pf ppf
    "%d logs, %d members, %d views (%d installs), %d casts, %d sends, %d deliveries, %d blocks, %d \
     refused, %d lost, %d exits"
    s.logs s.members s.views s.installs s.casts s.sends s.deliveries s.blocks s.refused s.lost
    s.exits

type file_problem = Unreadable of Log.file_error | Violation of violation

let pp_file_problem ppf = function
  | Unreadable e -> Log.pp_file_error ppf e
  | Violation v -> pp_violation ppf v

let check_files ?require_merge ?quiescent paths =
  let read path =
    match Log.read_file path with
    | Error e -> Error e
    | Ok [] -> Ok ("", [])
    | Ok (e :: _ as events) -> Ok (Log.me e, events)
  in
  let results = List.map read paths in
  match List.filter_map (function Error e -> Some (Unreadable e) | Ok _ -> None) results with
  | _ :: _ as errors -> Error errors
  | [] -> (
      let logs = List.filter_map (function Ok l -> Some l | Error _ -> None) results in
      let s = summarize logs in
      let nonempty = List.filter (fun (_, events) -> events <> []) logs in
      match check ?require_merge ?quiescent nonempty with
      | Ok () -> Ok s
      | Error l -> Error (List.map (fun v -> Violation v) l))
