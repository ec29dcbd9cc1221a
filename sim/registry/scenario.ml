type outcome = {
  seed : int;
  violations : string list;
  trace_hash : string;
  sent : int;
  delivered : int;
  datagrams : int;
  end_time : Consort.Time.t;
}

type t = {
  name : string;
  doc : string;
  run : ?trace:out_channel -> params:Consort.Params.t -> seed:int -> unit -> outcome;
}

let of_names ~names ~describe ~run =
  List.map
    (fun name ->
      let doc =
        match describe name with
        | Some d -> d
        | None -> invalid_arg ("Scenario.of_names: no description of " ^ name)
      in
      let run ?trace ~params ~seed () =
        match run ?trace ~params name ~seed with
        | Some o -> o
        | None -> invalid_arg ("Scenario.of_names: no run of " ^ name)
      in
      { name; doc; run })
    names

type registry = {
  area : string;
  check_params : Consort.Params.t -> (unit, string) result;
  scenarios : t list;
}

let all rs = List.concat_map (fun r -> r.scenarios) rs
let names rs = List.map (fun s -> s.name) (all rs)
let find rs n = List.find_opt (fun s -> s.name = n) (all rs)

let check_params rs p =
  List.fold_left (fun acc r -> match acc with Ok () -> r.check_params p | e -> e) (Ok ()) rs

let duplicates rs =
  let ns = names rs in
  List.sort_uniq compare
    (List.filter (fun n -> List.length (List.filter (String.equal n) ns) > 1) ns)

type error = Unknown_scenario of { name : string; known : string list }

let pp_error ppf (Unknown_scenario { name; known }) =
  Fmt.pf ppf "unknown scenario %S (known: %s)" name (String.concat ", " known)

let run rs ?trace ?(params = Consort.Params.empty) name ~seed =
  match find rs name with
  | Some s -> Ok (s.run ?trace ~params ~seed ())
  | None -> Error (Unknown_scenario { name; known = names rs })
