(* Ordering properties over member logs: total order, causal order, safe
   delivery. See order.mli. *)

type cast = { from : string; seq : int }

let pp_cast ppf c = Fmt.pf ppf "%s#%d" c.from c.seq

type violation =
  | Not_same_sequence of {
      view : string;
      next : string;
      a : string;
      b : string;
      index : int;
      at_a : cast option;
      at_b : cast option;
    }
  | No_total_order of { view : string; cycle : cast list; members : string list }
  | Not_causal of { member : string; line : int; view : string; cast : cast; before : cast }
  | Not_safe of { member : string; line : int; view : string; cast : cast; absent : string }

let pp_opt ppf = function Some c -> pp_cast ppf c | None -> Fmt.string ppf "nothing"

let pp_violation ppf = function
  | Not_same_sequence { view; next; a; b; index; at_a; at_b } ->
      Fmt.pf ppf
        "total order: %s and %s go on from view %s into %s but deliver different sequences in it: \
         cast %d is %a at %s, %a at %s"
        a b view next (index + 1) pp_opt at_a a pp_opt at_b b
  | No_total_order { view; cycle; members } ->
      Fmt.pf ppf "total order: no one order of the casts of view %s fits the deliveries of [%s]: %s"
        view (String.concat "; " members)
        (String.concat " < " (List.map (Fmt.str "%a" pp_cast) cycle))
  | Not_causal { member; line; view; cast; before } ->
      Fmt.pf ppf
        "[%s] line %d: causal order: delivered %a in view %s before %a, which its sender had \
         delivered or cast before casting it"
        member line pp_cast cast view pp_cast before
  | Not_safe { member; line; view; cast; absent } ->
      Fmt.pf ppf
        "[%s] line %d: safe delivery: delivered %a in view %s before its block, but member %s of \
         the view, which went on, never delivered it there"
        member line pp_cast cast view absent

(* {1 Logs, by member and view} *)

type ev = Own of cast | Got of { c : cast; line : int; pre : bool }

type mview = {
  member : string;
  view : string;
  members : string list;
  mutable evs : ev list; (* newest first while reading *)
  mutable blocked : bool;
  mutable next : string option; (* the view this member installed after this one *)
  mutable went_on : bool; (* the member installed a next view, or is alive at the end in this one *)
}

type logs = {
  views : (string, mview list) Hashtbl.t; (* by view, the members' *)
  by : (string * string, mview) Hashtbl.t; (* (member, view) *)
  order : string list; (* view ids, in first-seen order *)
}

let index logs =
  let views = Hashtbl.create 64 and by = Hashtbl.create 64 and order = ref [] in
  let given = Hashtbl.create 16 in
  List.iter
    (fun (member, evs) ->
      (* A member's second log is ignored (the virtual synchrony checker
         reports it). *)
      if not (Hashtbl.mem given member) then begin
        Hashtbl.replace given member ();
        let cur = ref None in
        List.iteri
          (fun i (e : Log.event) ->
            let line = i + 1 in
            match e with
            | Log.View { view; members; _ } ->
                if not (Hashtbl.mem by (member, view)) then begin
                  (match !cur with
                  | Some mv ->
                      mv.next <- Some view;
                      mv.went_on <- true
                  | None -> ());
                  let mv =
                    {
                      member;
                      view;
                      members;
                      evs = [];
                      blocked = false;
                      next = None;
                      went_on = false;
                    }
                  in
                  Hashtbl.replace by (member, view) mv;
                  if not (Hashtbl.mem views view) then order := view :: !order;
                  Hashtbl.replace views view
                    (mv :: Option.value ~default:[] (Hashtbl.find_opt views view));
                  cur := Some mv
                end
            | Log.Cast { view; seq; _ } -> (
                match !cur with
                | Some mv when mv.view = view -> mv.evs <- Own { from = member; seq } :: mv.evs
                | _ -> ())
            | Log.Deliver { view; from; kind = `Cast; seq; _ } -> (
                match !cur with
                | Some mv when mv.view = view ->
                    mv.evs <- Got { c = { from; seq }; line; pre = not mv.blocked } :: mv.evs
                | _ -> ())
            | Log.Block _ -> Option.iter (fun mv -> mv.blocked <- true) !cur
            | Log.Live _ -> Option.iter (fun mv -> mv.went_on <- true) !cur
            | _ -> ())
          evs
      end)
    logs;
  Hashtbl.iter (fun _ mv -> mv.evs <- List.rev mv.evs) by;
  { views; by; order = List.rev !order }

let members_of l v = List.sort compare (Option.value ~default:[] (Hashtbl.find_opt l.views v))
let delivered mv = List.filter_map (function Got { c; _ } -> Some c | Own _ -> None) mv.evs

let delivered_pre mv =
  List.filter_map (function Got { c; pre = true; _ } -> Some c | _ -> None) mv.evs

(* {1 Total order} *)

(* Whether one order fits all these sequences: the graph of consecutive
   pairs has no cycle. Returns a cycle if there is one. *)
let find_cycle (seqs : cast list list) =
  let succ = Hashtbl.create 256 and pred = Hashtbl.create 256 and indeg = Hashtbl.create 256 in
  let node c = if not (Hashtbl.mem indeg c) then Hashtbl.replace indeg c 0 in
  let edges = Hashtbl.create 256 in
  List.iter
    (fun s ->
      List.iter node s;
      let rec go = function
        | a :: (b :: _ as rest) ->
            if a <> b && not (Hashtbl.mem edges (a, b)) then begin
              Hashtbl.replace edges (a, b) ();
              Hashtbl.replace succ a (b :: Option.value ~default:[] (Hashtbl.find_opt succ a));
              Hashtbl.replace pred b (a :: Option.value ~default:[] (Hashtbl.find_opt pred b));
              Hashtbl.replace indeg b (Hashtbl.find indeg b + 1)
            end;
            go rest
        | _ -> ()
      in
      go s)
    seqs;
  let q = Queue.create () in
  Hashtbl.iter (fun c d -> if d = 0 then Queue.add c q) indeg;
  let done_ = Hashtbl.create 256 in
  while not (Queue.is_empty q) do
    let c = Queue.pop q in
    Hashtbl.replace done_ c ();
    List.iter
      (fun d ->
        let k = Hashtbl.find indeg d - 1 in
        Hashtbl.replace indeg d k;
        if k = 0 then Queue.add d q)
      (Option.value ~default:[] (Hashtbl.find_opt succ c))
  done;
  if Hashtbl.length done_ = Hashtbl.length indeg then None
  else begin
    (* Every node left has a predecessor left: walk back among them
       until one repeats. *)
    let left c = not (Hashtbl.mem done_ c) in
    let start =
      Hashtbl.fold (fun c _ acc -> if left c then Some c else acc) indeg None |> Option.get
    in
    let seen = Hashtbl.create 16 in
    let rec walk c path =
      if Hashtbl.mem seen c then
        (* [path] is newest first: the cycle is from [c]'s first visit. *)
        let rec upto acc = function
          | [] -> acc
          | x :: rest -> if x = c then x :: acc else upto (x :: acc) rest
        in
        List.rev (c :: List.rev (upto [] path)) |> List.rev
      else begin
        Hashtbl.replace seen c ();
        match List.find_opt left (Option.value ~default:[] (Hashtbl.find_opt pred c)) with
        | Some p -> walk p (c :: path)
        | None -> [ c ]
      end
    in
    Some (walk start [])
  end

let check_total_logs l =
  let out = ref [] in
  List.iter
    (fun view ->
      let mvs = members_of l view in
      (* Members that go on together deliver one same sequence. *)
      let classes = Hashtbl.create 4 in
      List.iter
        (fun mv ->
          match mv.next with
          | Some w ->
              Hashtbl.replace classes w (mv :: Option.value ~default:[] (Hashtbl.find_opt classes w))
          | None -> ())
        mvs;
      let pre = List.map delivered_pre mvs in
      let pre_of ms =
        List.map delivered_pre (List.filter (fun mv -> List.memq mv ms || not mv.went_on) mvs)
      in
      (match find_cycle pre with
      | Some cycle ->
          out :=
            No_total_order { view; cycle; members = List.map (fun mv -> mv.member) mvs } :: !out
      | None -> ());
      Hashtbl.iter
        (fun next ms ->
          match List.sort (fun a b -> compare a.member b.member) ms with
          | [] -> ()
          | first :: others -> (
              let ref_seq = delivered first in
              List.iter
                (fun mv ->
                  let s = delivered mv in
                  if s <> ref_seq then begin
                    let rec diff i a b =
                      match (a, b) with
                      | x :: a', y :: b' when x = y -> diff (i + 1) a' b'
                      | x :: _, y :: _ -> (i, Some x, Some y)
                      | x :: _, [] -> (i, Some x, None)
                      | [], y :: _ -> (i, None, Some y)
                      | [], [] -> (i, None, None)
                    in
                    let index, at_a, at_b = diff 0 ref_seq s in
                    out :=
                      Not_same_sequence
                        { view; next; a = first.member; b = mv.member; index; at_a; at_b }
                      :: !out
                  end)
                others;
              (* One order fits what those going on delivered and what
                 the members that crashed in the view delivered before
                 their block. *)
              let others = pre_of ms in
              if others <> [] then
                match find_cycle (ref_seq :: others) with
                | Some cycle ->
                    out :=
                      No_total_order { view; cycle; members = List.map (fun mv -> mv.member) ms }
                      :: !out
                | None -> ()))
        classes)
    l.order;
  List.rev !out

(* {1 Safe delivery} *)

let check_safe_logs l =
  let out = ref [] in
  List.iter
    (fun view ->
      let mvs = members_of l view in
      let sets =
        List.map
          (fun mv ->
            let h = Hashtbl.create 64 in
            List.iter (fun c -> Hashtbl.replace h c ()) (delivered mv);
            (mv, h))
          mvs
      in
      List.iter
        (fun mv ->
          List.iter
            (function
              | Got { c; line; pre = true } ->
                  List.iter
                    (fun (q, h) ->
                      if q.went_on && not (Hashtbl.mem h c) then
                        out :=
                          Not_safe { member = mv.member; line; view; cast = c; absent = q.member }
                          :: !out)
                    sets
              | _ -> ())
            mv.evs)
        mvs)
    l.order;
  List.rev !out

(* {1 Causal order} *)

(* The causal past of a cast: for each origin, how many of its casts in
   the view precede it (its sender delivered or cast them before, and
   their pasts). The members' events are walked together, each one's next
   event taken when the pasts it needs are known, so every event is looked
   at once; logs that contradict themselves (a cycle) are walked on with
   what is known. *)
let check_causal_logs l =
  let out = ref [] in
  List.iter
    (fun view ->
      let mvs = Array.of_list (members_of l view) in
      let k = Array.length mvs in
      let slot = Hashtbl.create 8 in
      Array.iteri (fun i mv -> Hashtbl.replace slot mv.member i) mvs;
      let evs = Array.map (fun mv -> Array.of_list mv.evs) mvs in
      (* Each origin's casts in the view, numbered from 1. *)
      let number = Hashtbl.create 64 and nth = Hashtbl.create 64 in
      Array.iter
        (fun mv ->
          let c = ref 0 in
          List.iter
            (function
              | Own x ->
                  incr c;
                  Hashtbl.replace number x !c;
                  Hashtbl.replace nth (x.from, !c) x
              | Got _ -> ())
            mv.evs)
        mvs;
      let past = Hashtbl.create 64 in
      let cursor = Array.make k 0 in
      let running = Array.init k (fun _ -> Array.make k 0) in
      let got = Array.init k (fun _ -> Array.make k 0) in
      let merge into v = Array.iteri (fun i x -> if x > into.(i) then into.(i) <- x) v in
      (* Whether member [i]'s next event can be taken now. *)
      let ready i =
        cursor.(i) < Array.length evs.(i)
        &&
        match evs.(i).(cursor.(i)) with
        | Own _ -> true
        | Got { c; _ } ->
            (not (Hashtbl.mem number c)) || Hashtbl.mem past c || not (Hashtbl.mem slot c.from)
      in
      let take i =
        let mv = mvs.(i) in
        (match evs.(i).(cursor.(i)) with
        | Own c ->
            Hashtbl.replace past c (Array.copy running.(i));
            let n = Hashtbl.find number c in
            running.(i).(i) <- max running.(i).(i) n;
            got.(i).(i) <- max got.(i).(i) n
        | Got { c; line; _ } -> (
            match (Hashtbl.find_opt number c, Hashtbl.find_opt slot c.from) with
            | Some n, Some o ->
                let p = match Hashtbl.find_opt past c with Some p -> p | None -> Array.make k 0 in
                (try
                   Array.iteri
                     (fun x need ->
                       if x <> o && got.(i).(x) < need then begin
                         (match Hashtbl.find_opt nth (mvs.(x).member, need) with
                         | Some before ->
                             out :=
                               Not_causal { member = mv.member; line; view; cast = c; before }
                               :: !out
                         | None -> ());
                         raise Exit
                       end)
                     p
                 with Exit -> ());
                merge running.(i) p;
                running.(i).(o) <- max running.(i).(o) n;
                got.(i).(o) <- max got.(i).(o) n
            | _ -> ()));
        cursor.(i) <- cursor.(i) + 1
      in
      let left () =
        Array.exists (fun x -> x) (Array.mapi (fun i c -> c < Array.length evs.(i)) cursor)
      in
      while left () do
        let progress = ref false in
        for i = 0 to k - 1 do
          while ready i do
            take i;
            progress := true
          done
        done;
        if not !progress then
          (* A cycle: take the first waiting event with what is known. *)
          match List.find_opt (fun i -> cursor.(i) < Array.length evs.(i)) (List.init k Fun.id) with
          | Some i -> take i
          | None -> ()
      done)
    l.order;
  List.rev !out

let result = function [] -> Ok () | vs -> Error vs
let check_total logs = result (check_total_logs (index logs))
let check_safe logs = result (check_safe_logs (index logs))
let check_causal logs = result (check_causal_logs (index logs))
