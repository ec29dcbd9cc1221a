(* The Primary feature of the group runtime: the quorum of the current view,
   as told to the application, and the dynamic votes' knowledge across views. *)

open Consort
module Log = Group_log.Log

type t = {
  me : string;
  config : Primary.config option; (* with the Primary layer: the votes *)
  on_primary : Primary.quorum -> unit;
  mutable quorum : Primary.quorum option; (* of the current view, with Primary: as told *)
  mutable pending : Primary.quorum option;
      (* a view with the quorum, not primary until every member is known to have installed it *)
  mutable past_primaries : Primary.knowledge; (* dynamic votes: of past primaries, across views *)
  mutable attempt : Primary.session option; (* dynamic votes: the current view's, attempted *)
  mutable members : (string * string) list; (* the current view's, by id and address *)
}

let create ~me ~config ~on_primary =
  {
    me;
    config;
    on_primary;
    quorum = None;
    pending = None;
    past_primaries = Primary.no_knowledge;
    attempt = None;
    members = [];
  }

let quorum t = t.quorum
let waiting t = t.pending <> None
let outside_primary t = match t.quorum with Some q -> not q.Primary.primary | None -> false

let refusal t =
  if t.pending = None && match t.quorum with Some q -> not q.Primary.primary | None -> false then
    Some (Fmt.str "%a" Primary.pp_quorum (Option.get t.quorum))
  else None

(* A view with the quorum that ends before every member was heard in it was
   never primary. *)
let end_view t =
  match t.pending with
  | Some q ->
      t.pending <- None;
      let q = { q with Primary.primary = false } in
      t.quorum <- Some q;
      t.on_primary q
  | None -> ()

type decision = { decision : Primary.quorum option; dynamic : bool }

(* With Primary: a view without the quorum is told so at once; one with it
   is primary once every member has said it is there (Primary.Confirmed),
   casts waiting until then. *)
let install t ~layers ~members =
  let with_primary =
    match t.config with
    | Some pc when List.exists (fun l -> Layer.name l = Primary.name) layers -> Some pc
    | _ -> None
  in
  t.attempt <- None;
  t.members <- members;
  let dynamic = match with_primary with Some pc -> Primary.mode pc = Dynamic | None -> false in
  let decision =
    match with_primary with
    | Some pc when dynamic ->
        (* Undecided until every member's knowledge is in: held as a view with the
           quorum that is not yet confirmed. *)
        Some
          { (Primary.decide_dynamic pc ~members:t.members [] |> fst) with Primary.primary = true }
    | Some pc -> Some (Primary.decide pc (List.map snd members))
    | None -> None
  in
  (match decision with
  | Some q when q.Primary.primary ->
      t.quorum <- Some { q with primary = false };
      t.pending <- Some q
  | q ->
      t.quorum <- q;
      t.pending <- None);
  { decision; dynamic }

let start t ~vid ~dn_ctl { decision; dynamic } =
  match decision with
  | Some q when not q.Primary.primary ->
      Log.info (fun m -> m "%s: view %s is %a" t.me vid Primary.pp_quorum q);
      t.on_primary q
  | Some _ when dynamic -> dn_ctl (Primary.Start_dynamic t.past_primaries)
  | Some _ -> dn_ctl Primary.Start
  | None -> ()

(* The view's quorum [q] is decided (primary or not). *)
let decided t ~vid q =
  t.pending <- None;
  t.quorum <- Some q;
  Log.info (fun m -> m "%s: view %s is %a" t.me vid Primary.pp_quorum q);
  t.on_primary q;
  true

let on_ctl t ~vid ~dn_ctl (e : Event.up_ctl) =
  match e with
  | Primary.Heard ks -> (
      match (t.pending, t.config) with
      | Some _, Some pc when t.attempt = None ->
          let q, session = Primary.decide_dynamic pc ~members:t.members ks in
          t.past_primaries <- Primary.learn t.past_primaries ks;
          if q.Primary.primary then begin
            (* Recorded before the attempt goes out: from now on this view may form at
               another member. *)
            t.past_primaries <-
              { t.past_primaries with ambiguous = session :: t.past_primaries.ambiguous };
            t.attempt <- Some session;
            t.pending <- Some q;
            dn_ctl Primary.Attempt;
            false
          end
          else decided t ~vid q
      | _ -> false)
  | Primary.Confirmed -> (
      match t.pending with
      | Some q ->
          Option.iter
            (fun s -> t.past_primaries <- { Primary.last = Some s; ambiguous = [] })
            t.attempt;
          decided t ~vid q
      | None -> false)
  | _ -> false
