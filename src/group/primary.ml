open Consort

let name = "primary"

module Param = struct
  let expected = "primary.expected"
  let votes = "primary.votes"

  let () =
    Params.register expected (Params.Int 0) ~min:(Params.Int 0) ~max:(Params.Int 1_000_000)
      ~doc:"Primary: the votes of the whole configured group (the quorum is half of it plus one)";
    Params.register votes (Params.String "")
      ~doc:
        "Primary: ADDR=N items joined by + giving members' votes by address; an address not listed \
         has one vote"
end

type quorum = { primary : bool; votes : int; needed : int; expected : int }

let pp_quorum ppf q =
  Fmt.pf ppf "%s (%d of %d votes, %d needed)"
    (if q.primary then "primary" else "not primary")
    q.votes q.expected q.needed

type config = { table : (string * int) list; expected : int }

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
  match parse_votes (Params.string params Param.votes) with
  | Error e -> Error e
  | Ok table ->
      let listed = List.fold_left (fun acc (_, v) -> acc + v) 0 table in
      let expected = max listed (Params.int params Param.expected) in
      if expected <= 0 then
        Error
          (Printf.sprintf "property Primary needs %s (the votes of the whole group) or %s"
             Param.expected Param.votes)
      else Ok { table; expected }

let decide c addrs =
  let addrs = List.sort_uniq compare addrs in
  let votes =
    List.fold_left (fun acc a -> acc + Option.value ~default:1 (List.assoc_opt a c.table)) 0 addrs
  in
  let needed = (c.expected / 2) + 1 in
  { primary = votes >= needed; votes; needed; expected = c.expected }

let primary_component =
  Contract.v "primary-component" ~doc:"views told primary when they hold a quorum of votes"

type Event.dn_ctl += Start
type Event.up_ctl += Confirmed

module L = struct
  type header = Data | Here

  type t = {
    out : header Layer.out;
    heard : bool array; (* the members whose Here came, by rank *)
    mutable started : bool;
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
        ])

  let pp_header ppf = function Data -> Fmt.string ppf "data" | Here -> Fmt.string ppf "here"
  let provides = [ primary_component ]
  let requires = [ Gmp.membership ]

  let create (ctx : Layer.ctx) out =
    {
      out;
      heard = Array.make (View.nmembers ctx.view) false;
      started = false;
      confirmed = false;
      nonsense = 0;
    }

  let check t =
    if (not t.confirmed) && Array.for_all Fun.id t.heard then begin
      t.confirmed <- true;
      t.out.up_ctl Confirmed
    end

  let up t (src : Event.src) h msg =
    match (src, h) with
    | Event.Cast_from r, Here when r >= 0 && r < Array.length t.heard ->
        Msg.release msg;
        t.heard.(r) <- true;
        check t
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
    | e -> t.out.dn_ctl e

  let timer _ _ = ()

  let counters t =
    [
      ("heard", Array.fold_left (fun n b -> if b then n + 1 else n) 0 t.heard);
      ("nonsense", t.nonsense);
    ]
end

let layer : Layer.t = (module L)
