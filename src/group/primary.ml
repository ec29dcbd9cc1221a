open Consort

let name = "primary"

module Param = struct
  let expected = "primary.expected"
  let votes = "primary.votes"
  let mode = "primary.mode"

  let () =
    Params.register expected (Params.Int 0) ~min:(Params.Int 0) ~max:(Params.Int 1_000_000)
      ~doc:"Primary: the votes of the whole configured group (the quorum is half of it plus one)";
    Params.register votes (Params.String "")
      ~doc:
        "Primary: ADDR=N items joined by + giving members' votes by address; an address not listed \
         has one vote";
    Params.register mode (Params.String "static")
      ~doc:
        "Primary: static (a majority of the configured votes) or dynamic (a majority of the last \
         primary view's votes; the first primary needs every configured vote)"
end

type mode = Static | Dynamic
type basis = Configured | Last_primary of int

type quorum = {
  primary : bool;
  votes : int;
  needed : int;
  expected : int;
  basis : basis;
  blocking : string option;
}

let pp_quorum ppf q =
  let p = if q.primary then "primary" else "not primary" in
  match q.basis with
  | Configured -> (
      Fmt.pf ppf "%s (%d of %d votes, %d needed" p q.votes q.expected q.needed;
      match q.blocking with Some b -> Fmt.pf ppf "; %s)" b | None -> Fmt.pf ppf ")")
  | Last_primary e -> (
      Fmt.pf ppf "%s (%d of the %d votes of last primary #%d, %d needed" p q.votes q.expected e
        q.needed;
      match q.blocking with Some b -> Fmt.pf ppf "; %s)" b | None -> Fmt.pf ppf ")")

type config = { table : (string * int) list; expected : int; mode : mode }

(* The address is everything before the last '=': addresses hold ':'. *)
let parse_votes s =
  let items = List.filter (( <> ) "") (List.map String.trim (String.split_on_char '+' s)) in
  List.fold_left
    (fun acc item ->
      Result.bind acc (fun l ->
          match String.rindex_opt item '=' with
          | None -> Error (Printf.sprintf "%s: %S is not ADDR=VOTES" Param.votes item)
          | Some i -> (
              let addr = String.sub item 0 i
              and n = String.sub item (i + 1) (String.length item - i - 1) in
              match int_of_string_opt n with
              | Some v when v >= 0 && v <= 1000 && addr <> "" ->
                  if List.mem_assoc addr l then
                    Error (Printf.sprintf "%s: %s is given twice" Param.votes addr)
                  else Ok ((addr, v) :: l)
              | _ ->
                  Error
                    (Printf.sprintf "%s: %S is not ADDR=VOTES with VOTES from 0 to 1000" Param.votes
                       item))))
    (Ok []) items
  |> Result.map List.rev

let config params =
  match
    ( parse_votes (Params.string params Param.votes),
      match Params.string params Param.mode with
      | "static" -> Ok Static
      | "dynamic" -> Ok Dynamic
      | m -> Error (Printf.sprintf "%s: %S is not static or dynamic" Param.mode m) )
  with
  | Error e, _ | _, Error e -> Error e
  | Ok table, Ok mode ->
      let listed = List.fold_left (fun acc (_, v) -> acc + v) 0 table in
      let expected = max listed (Params.int params Param.expected) in
      if expected <= 0 then
        Error
          (Printf.sprintf "property Primary needs %s (the votes of the whole group) or %s"
             Param.expected Param.votes)
      else Ok { table; expected; mode }

let mode c = c.mode
let votes_of c addr = Option.value ~default:1 (List.assoc_opt addr c.table)

let decide c addrs =
  let addrs = List.sort_uniq compare addrs in
  let votes = List.fold_left (fun acc a -> acc + votes_of c a) 0 addrs in
  let needed = (c.expected / 2) + 1 in
  {
    primary = votes >= needed;
    votes;
    needed;
    expected = c.expected;
    basis = Configured;
    blocking = None;
  }

(* Dynamic votes: the primary follows the last primary view, as in the dynamic voting of Jajodia
   and Mutchler, made safe against a primary that formed at some members only as in Lotem, Keidar
   and Dolev ("Dynamic voting for consistent primary components", PODC 1997).

   A view becomes primary in two rounds. In the first, every member casts what it knows: the last
   view it knows to have formed as primary, and its ambiguous sessions, views that passed the rule
   and in which it attempted, without learning whether every member attempted too. Once every
   member's knowledge is in, every member computes the same decision from the same inputs. If the
   view passes, each member records it as ambiguous, then casts an attempt; the view forms (is
   primary) at a member once every member's attempt is in, and then becomes that member's last
   primary, its ambiguous sessions resolved. A view that ends before that stays ambiguous at the
   members that attempted, and binds the views that follow.

   The rule: let [top] be the highest epoch of a last primary known to any member. The view needs
   a majority of the votes of every last primary of epoch [top] known, and of every ambiguous
   session of epoch [top] or later known to any member (exactly half is enough when the view holds
   the session's least member). With no last primary known at all, the view needs every configured
   vote (the wait-for-all of Corosync's votequorum), so a cluster restarted from scratch, whose
   members have forgotten, cannot form a primary beside a surviving one. The view's own epoch is
   [top + 1].

   Why two views that are primary always meet: each primary holds a majority of the last primary
   before it, or of an ambiguous session that may have formed after it, and every member of a
   primary attempted there, so records it until it learns of a later primary. *)

type session = { epoch : int; members : (string * int) list }
type knowledge = { last : session option; ambiguous : session list }

let no_knowledge = { last = None; ambiguous = [] }
let max_ambiguous = 64
let max_members = 4096
let session_key s = (s.epoch, List.sort compare s.members)

let session_codec =
  Codec.(
    map ~name:"session"
      (fun s -> (s.epoch, s.members))
      (fun (epoch, members) -> { epoch; members })
      (pair varint (list ~max:max_members (pair (string ~max:256 ()) varint))))

let knowledge_codec =
  Codec.(
    map ~name:"knowledge"
      (fun k -> (k.last, k.ambiguous))
      (fun (last, ambiguous) -> { last; ambiguous })
      (pair (option session_codec) (list ~max:max_ambiguous session_codec)))

let pp_session ppf s =
  Fmt.pf ppf "#%d [%a]" s.epoch Fmt.(list ~sep:(any " ") string) (List.map fst s.members)

let dedup l = List.sort_uniq (fun a b -> compare (session_key a) (session_key b)) l

let top_epoch ks =
  List.fold_left (fun acc k -> match k.last with Some s -> max acc s.epoch | None -> acc) 0 ks

(* What a member keeps after hearing [ks]: the latest last primary known to anyone (a view that
   formed is a fact, whoever tells it), and its own ambiguous sessions not older than it. *)
let learn own ks =
  let last =
    List.fold_left
      (fun acc k ->
        match (acc, k.last) with
        | Some a, Some b when b.epoch > a.epoch -> Some b
        | None, Some b -> Some b
        | acc, _ -> acc)
      own.last ks
  in
  let floor = match last with Some s -> s.epoch | None -> 0 in
  { last; ambiguous = List.filter (fun s -> s.epoch >= floor) own.ambiguous }

let decide_dynamic c ~members ks =
  let ids = List.map fst members in
  let votes = List.fold_left (fun acc (_, a) -> acc + votes_of c a) 0 members in
  let top = top_epoch ks in
  let lasts =
    dedup
      (List.filter_map
         (fun k -> match k.last with Some s when s.epoch = top -> Some s | _ -> None)
         ks)
  in
  let amb =
    dedup (List.concat_map (fun k -> List.filter (fun s -> s.epoch >= top) k.ambiguous) ks)
  in
  let session =
    { epoch = top + 1; members = List.map (fun (id, a) -> (id, votes_of c a)) members }
  in
  let have s =
    List.fold_left (fun acc (id, v) -> if List.mem id ids then acc + v else acc) 0 s.members
  in
  let total s = List.fold_left (fun acc (_, v) -> acc + v) 0 s.members in
  let least s =
    List.fold_left
      (fun acc (id, v) ->
        if v > 0 then match acc with Some l when l <= id -> acc | _ -> Some id else acc)
      None s.members
  in
  let holds s =
    let h = have s and t = total s in
    2 * h > t
    || (2 * h = t && h > 0 && match least s with Some l -> List.mem l ids | None -> false)
  in
  let full = List.exists (fun k -> List.length k.ambiguous >= max_ambiguous) ks in
  let failing = List.filter (fun s -> not (holds s)) (lasts @ amb) in
  let blocking =
    if full then Some (Printf.sprintf "a member holds %d unresolved attempts" max_ambiguous)
    else
      match failing with
      | s :: _ ->
          Some
            (Fmt.str "%s %a holds %d of %d votes here"
               (if List.exists (fun l -> session_key l = session_key s) lasts then "last primary"
                else "ambiguous attempt")
               pp_session s (have s) (total s))
      | [] -> None
  in
  let q =
    match lasts with
    | _ when votes >= c.expected ->
        (* Every configured vote is here: no other component holds any,
           so none can be primary, whatever the past primaries were (one
           whose members restarted as new incarnations, keeping nothing,
           is never held again otherwise). As Corosync's [wait_for_all]
           after a whole cluster restarts. *)
        {
          primary = true;
          votes;
          needed = c.expected;
          expected = c.expected;
          basis = Configured;
          blocking = None;
        }
    | [] ->
        let ok = votes >= c.expected in
        {
          primary = ok && blocking = None;
          votes;
          needed = c.expected;
          expected = c.expected;
          basis = Configured;
          blocking =
            (match blocking with
            | Some b -> Some b
            | None -> if ok then None else Some "no primary yet: every configured vote needed");
        }
    | l :: _ ->
        let t = total l in
        {
          primary = blocking = None;
          votes = have l;
          needed = (t / 2) + 1;
          expected = t;
          basis = Last_primary l.epoch;
          blocking;
        }
  in
  (q, session)

let primary_component =
  Contract.v "primary-component" ~doc:"views told primary when they hold a quorum of votes"

type Event.dn_ctl += Start | Start_dynamic of knowledge | Attempt
type Event.up_ctl += Confirmed | Heard of knowledge list

module L = struct
  type header = Data | Here | Here_k of knowledge | Attempted

  type t = {
    out : header Layer.out;
    heard : bool array; (* the members whose Here (or attempt, when dynamic) came, by rank *)
    known : knowledge option array; (* dynamic: each member's knowledge, by rank *)
    mutable started : bool;
    mutable told : bool; (* dynamic: Heard went up *)
    mutable attempted : bool;
    mutable confirmed : bool;
    mutable nonsense : int;
  }

  let name = name

  let codec =
    Codec.(
      union "primary"
        [
          case 0 "data" unit (function Data -> Some () | _ -> None) (fun () -> Data);
          case 1 "here" unit (function Here -> Some () | _ -> None) (fun () -> Here);
          case 2 "here-k" knowledge_codec
            (function Here_k k -> Some k | _ -> None)
            (fun k -> Here_k k);
          case 3 "attempt" unit (function Attempted -> Some () | _ -> None) (fun () -> Attempted);
        ])

  let pp_header ppf = function
    | Data -> Fmt.string ppf "data"
    | Here -> Fmt.string ppf "here"
    | Here_k k ->
        Fmt.pf ppf "here last=%a ambiguous=%d"
          Fmt.(option ~none:(any "none") pp_session)
          k.last (List.length k.ambiguous)
    | Attempted -> Fmt.string ppf "attempt"

  let provides = [ primary_component ]
  let requires = [ Gmp.membership ]

  let create (ctx : Layer.ctx) out =
    let n = View.nmembers ctx.view in
    {
      out;
      heard = Array.make n false;
      known = Array.make n None;
      started = false;
      told = false;
      attempted = false;
      confirmed = false;
      nonsense = 0;
    }

  let check t =
    if (not t.confirmed) && Array.for_all Fun.id t.heard then begin
      t.confirmed <- true;
      t.out.up_ctl Confirmed
    end

  let check_known t =
    if (not t.told) && Array.for_all Option.is_some t.known then begin
      t.told <- true;
      t.out.up_ctl (Heard (Array.to_list (Array.map Option.get t.known)))
    end

  let up t (src : Event.src) h msg =
    match (src, h) with
    | Event.Cast_from r, Here when r >= 0 && r < Array.length t.heard ->
        Msg.release msg;
        t.heard.(r) <- true;
        check t
    | Event.Cast_from r, Here_k k when r >= 0 && r < Array.length t.known ->
        Msg.release msg;
        if t.known.(r) = None then t.known.(r) <- Some k;
        check_known t
    | Event.Cast_from r, Attempted when r >= 0 && r < Array.length t.heard ->
        Msg.release msg;
        t.heard.(r) <- true;
        if t.attempted then check t
    | _, Data -> t.out.up src msg
    | _ ->
        t.nonsense <- t.nonsense + 1;
        Msg.release msg

  let up_ctl t e = t.out.up_ctl e
  let dn t dst msg = t.out.dn dst Data msg

  let dn_ctl t e =
    match e with
    | Start ->
        if not t.started then begin
          t.started <- true;
          t.out.dn Event.Cast Here (Msg.empty ())
        end
    | Start_dynamic k ->
        if not t.started then begin
          t.started <- true;
          t.out.dn Event.Cast (Here_k k) (Msg.empty ())
        end
    | Attempt ->
        if t.told && not t.attempted then begin
          t.attempted <- true;
          t.out.dn Event.Cast Attempted (Msg.empty ());
          check t
        end
    | e -> t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("heard", Array.fold_left (fun n b -> if b then n + 1 else n) 0 t.heard);
      ("known", Array.fold_left (fun n k -> if k <> None then n + 1 else n) 0 t.known);
      ("nonsense", t.nonsense);
    ]
end

let layer : Layer.t = (module L)
