open Cmdliner

let control =
  Arg.(
    required
    & opt (some string) None
    & info [ "control" ] ~docv:"PATH"
        ~doc:"The control socket of a member or a daemon (its $(b,--control)).")

let control_opt =
  Arg.(
    value
    & opt (some string) None
    & info [ "control" ] ~docv:"PATH"
        ~doc:
          "The control socket of a member or a daemon (its $(b,--control)). Without it: every \
           socket in $(b,XDG_RUNTIME_DIR/consort) and $(b,/run/consort) (where members started \
           without $(b,--control) and consortd's systemd unit put theirs), one after the other; a \
           stale socket (nobody answers) or another user's is noted and skipped.")

let group =
  Arg.(
    value
    & opt (some string) None
    & info [ "group" ] ~docv:"NAME"
        ~doc:
          "At a daemon's control socket ($(b,consortd --control)): the members of this group only; \
           a cast or send goes through the first member the daemon holds in it.")

(* [group NAME REQUEST] for a daemon; a member answers it for its own group. *)
let in_group group line =
  match group with None -> line | Some g -> Printf.sprintf "group %s %s" g line

let json = Arg.(value & flag & info [ "json" ] ~doc:"Print the answer as it came: one JSON object.")

(* Asks one line; [k] reads the JSON answer. *)
let ask cmd path line k =
  match Consort_ops.Serve.request (Unix.ADDR_UNIX path) line with
  | Error e -> Consort_cli.fail cmd "%s" e
  | Ok answer -> (
      match Yojson.Safe.from_string answer with
      | `Assoc fields as j when List.mem_assoc "error" fields -> (
          match List.assoc "error" fields with
          | `String e -> Consort_cli.fail cmd "%s" e
          | _ -> Consort_cli.fail cmd "%s" (Yojson.Safe.to_string j))
      | j -> k answer j
      | exception Yojson.Json_error e -> Consort_cli.fail cmd "not a control socket's answer: %s" e)

let str j k =
  match j with
  | `Assoc l -> ( match List.assoc_opt k l with Some (`String s) -> s | _ -> "?")
  | _ -> "?"

let int j k =
  match j with
  | `Assoc l -> ( match List.assoc_opt k l with Some (`Int n) -> n | _ -> -1)
  | _ -> -1

let bool j k =
  match j with
  | `Assoc l -> ( match List.assoc_opt k l with Some (`Bool b) -> b | _ -> false)
  | _ -> false

let members_of j =
  match j with
  | `Assoc l -> ( match List.assoc_opt "members" l with Some (`List m) -> m | _ -> [])
  | _ -> []

(* A daemon's answer: {"daemon":{...},"members":[...]}. *)
let is_daemon j = match j with `Assoc l -> List.mem_assoc "daemon" l | _ -> false
let field j k = match j with `Assoc l -> List.assoc_opt k l | _ -> None

let print_member_status j =
  if not (match j with `Assoc l -> List.mem_assoc "view" l | _ -> false) then
    Fmt.pr "group %s: not joined yet@." (str j "group")
  else begin
    let members = members_of j in
    let me = str j "me" and coord = str j "coordinator" in
    Fmt.pr "group %s, view %s (ltime %d), %d members@." (str j "group") (str j "view")
      (int j "ltime") (List.length members);
    List.iteri
      (fun i m ->
        let m = match m with `String s -> s | _ -> "?" in
        let tags =
          List.filter_map
            (fun (c, t) -> if c then Some t else None)
            [ (m = coord, "coordinator"); (m = me, "this member") ]
        in
        Fmt.pr "  %d %s%s@." i m (if tags = [] then "" else " (" ^ String.concat ", " tags ^ ")"))
      members;
    Fmt.pr "view change under way: %s; flow control: %s@."
      (if bool j "blocked" then "yes" else "no")
      (if bool j "flow_blocked" then "paused" else "open");
    (match field j "quorum" with
    | Some (`Assoc _ as q) ->
        (* As corosync-quorumtool -s: expected and total votes, the quorum, quorate or not. *)
        Fmt.pr "quorum: %s, %d of %d expected votes, %d needed@."
          (if bool q "quorate" then "quorate (primary)" else "not quorate (not primary)")
          (int q "votes") (int q "expected") (int q "needed")
    | _ -> ());
    match field j "seal" with
    | Some (`Assoc _ as s) ->
        Fmt.pr "sealed: %s, per-view keys %s, clocks accepted within %gs (seal.freshness)@."
          (str s "mode")
          (if bool s "rekey" then "on" else "off")
          (match field s "freshness_s" with
          | Some (`Float f) -> f
          | Some (`Int i) -> float_of_int i
          | _ -> Float.nan)
    | _ -> ()
  end

let print_status group j =
  if is_daemon j then begin
    let d = Option.value ~default:`Null (field j "daemon") in
    let ms = members_of j in
    Fmt.pr "consortd: %d clients, %d members%s@." (int d "clients") (int d "members")
      (match group with
      | Some g -> Printf.sprintf " (%d in group %s)" (List.length ms) g
      | None -> "");
    List.iter
      (fun m ->
        Fmt.pr "member %s (client %d, handle %d): " (str m "me") (int m "client") (int m "handle");
        print_member_status m)
      ms
  end
  else print_member_status j

(* Every socket of the runtime directories (Consort_ops.Sockets): each one's answer, a stale one
   (nobody answers) or another user's noted and skipped; a member of another group than --group
   left out. *)
let status_all group json =
  let dirs = Consort_ops.Sockets.dirs () in
  let found =
    List.filter_map
      (function
        | Consort_ops.Sockets.Skipped (p, why) -> Some (p, Error why)
        | Socket p -> (
            match
              Consort_ops.Serve.request ~timeout:2. (Unix.ADDR_UNIX p) (in_group group "status")
            with
            | Error e -> Some (p, Error ("stale, nobody answers: " ^ e))
            | Ok answer -> (
                match Yojson.Safe.from_string answer with
                | `Assoc fields when List.mem_assoc "error" fields ->
                    if group = None then Some (p, Error "answers with an error") else None
                | j -> Some (p, Ok j)
                | exception Yojson.Json_error _ -> Some (p, Error "not a control socket's answer"))))
      (Consort_ops.Sockets.scan dirs)
  in
  if json then
    print_endline
      (Yojson.Safe.to_string
         (`Assoc
            [
              ("dirs", `List (List.map (fun d -> `String d) dirs));
              ( "sockets",
                `List
                  (List.map
                     (fun (p, r) ->
                       match r with
                       | Ok j -> `Assoc [ ("path", `String p); ("status", j) ]
                       | Error why -> `Assoc [ ("path", `String p); ("skipped", `String why) ])
                     found) );
            ]))
  else if found = [] then
    Fmt.pr "no member or daemon found (looked in %s)@." (String.concat ", " dirs)
  else
    List.iter
      (fun (p, r) ->
        match r with
        | Error why -> Fmt.pr "%s: skipped: %s@." p why
        | Ok j ->
            Fmt.pr "%s:@." p;
            print_status group j)
      found;
  0

(* --group NAME --all: every member of the group whose control socket is on this machine (in the
   runtime directories, members of a daemon there included), and, asked through the group by one of
   those members (status-all), every other member of its view, wherever it runs. A member neither
   here nor answering is named with the reason. *)
let status_group_all name json =
  let answers =
    List.filter_map
      (function
        | Consort_ops.Sockets.Skipped _ -> None
        | Socket p -> (
            match
              Consort_ops.Serve.request ~timeout:2. (Unix.ADDR_UNIX p)
                (in_group (Some name) "status")
            with
            | Error _ -> None
            | Ok answer -> (
                match Yojson.Safe.from_string answer with
                | `Assoc fields when List.mem_assoc "error" fields -> None
                | j -> Some (p, j)
                | exception Yojson.Json_error _ -> None)))
      (Consort_ops.Sockets.scan (Consort_ops.Sockets.dirs ()))
  in
  let members =
    List.concat_map
      (fun (p, j) -> if is_daemon j then List.map (fun m -> (p, m)) (members_of j) else [ (p, j) ])
      answers
    |> List.filter (fun (_, m) -> str m "group" = name)
  in
  let here = List.map (fun (_, m) -> str m "me") members in
  (* One member here asks the others through the group. *)
  let asker = List.find_opt (fun (_, j) -> not (is_daemon j)) answers in
  let through =
    match asker with
    | None -> []
    | Some (p, j) -> (
        match
          Consort_ops.Serve.request ~timeout:6. (Unix.ADDR_UNIX p)
            (in_group (Some name) "status-all")
        with
        | Error _ -> []
        | Ok answer -> (
            match Yojson.Safe.from_string answer with
            | `Assoc fields when not (List.mem_assoc "error" fields) ->
                List.filter_map
                  (fun m ->
                    let id = str m "me" in
                    if List.mem id here then None
                    else
                      match m with
                      | `Assoc l -> (
                          match (List.assoc_opt "status" l, List.assoc_opt "error" l) with
                          | Some st, _ -> Some (id, Ok (str j "me", st))
                          | None, Some (`String why) -> Some (id, Error why)
                          | _ -> None)
                      | _ -> None)
                  (match List.assoc_opt "members" fields with Some (`List l) -> l | _ -> [])
            | _ | (exception Yojson.Json_error _) -> []))
  in
  let remote =
    List.filter_map (function id, Ok (via, st) -> Some (id, via, st) | _ -> None) through
  in
  let unanswered =
    List.filter_map (function id, Error why -> Some (id, why) | _ -> None) through
  in
  let in_views =
    List.sort_uniq compare
      (List.concat_map
         (fun (_, m) -> List.filter_map (function `String s -> Some s | _ -> None) (members_of m))
         members)
  in
  let reached = here @ List.map (fun (id, _, _) -> id) remote in
  let elsewhere = List.filter (fun id -> not (List.mem id reached)) in_views in
  if json then
    print_endline
      (Yojson.Safe.to_string
         (`Assoc
            [
              ("group", `String name);
              ( "members",
                `List
                  (List.map (fun (p, m) -> `Assoc [ ("path", `String p); ("status", m) ]) members
                  @ List.map
                      (fun (_, via, st) -> `Assoc [ ("through", `String via); ("status", st) ])
                      remote) );
              ( "unanswered",
                `List
                  (List.map
                     (fun (id, why) -> `Assoc [ ("me", `String id); ("error", `String why) ])
                     unanswered) );
              ("elsewhere", `List (List.map (fun id -> `String id) elsewhere));
            ]))
  else begin
    List.iter
      (fun (p, m) ->
        Fmt.pr "%s (%s):@." (str m "me") p;
        print_member_status m)
      members;
    List.iter
      (fun (id, via, st) ->
        Fmt.pr "%s (through the group, asked by %s):@." id via;
        print_member_status st)
      remote;
    Fmt.pr "group %s: %d members answered, %d on this machine and %d through the group%s%s@." name
      (List.length members + List.length remote)
      (List.length members) (List.length remote)
      (if unanswered = [] then ""
       else
         "; no answer from "
         ^ String.concat ", "
             (List.map (fun (id, why) -> Printf.sprintf "%s (%s)" id why) unanswered))
      (let silent = List.filter (fun id -> not (List.mem_assoc id unanswered)) elsewhere in
       if silent = [] then "" else "; in their views but not reached: " ^ String.concat ", " silent)
  end;
  0

let status path group all json =
  match (path, group, all) with
  | None, Some name, true -> status_group_all name json
  | _, None, true -> Consort_cli.fail "status" "--all needs --group NAME"
  | Some _, _, true ->
      Consort_cli.fail "status" "--all asks every socket on this machine: give no --control"
  | None, _, false -> status_all group json
  | Some path, _, false ->
      ask "status" path (in_group group "status") @@ fun raw j ->
      if json then print_endline raw else print_status group j;
      0

let print_layers = function
  | `Assoc layers ->
      List.iter
        (fun (layer, c) ->
          match c with
          | `Assoc kvs ->
              let items =
                List.filter_map
                  (fun (k, v) ->
                    match v with `Int n -> Some (Printf.sprintf "%s=%d" k n) | _ -> None)
                  kvs
              in
              Fmt.pr "%-10s %s@." layer (String.concat " " items)
          | _ -> ())
        layers
  | _ -> ()

let counters path group json =
  ask "counters" path (in_group group "counters") @@ fun raw j ->
  if json then print_endline raw
  else if is_daemon j then begin
    Option.iter (fun d -> print_layers (`Assoc [ ("consortd", d) ])) (field j "daemon");
    List.iter
      (fun m ->
        Fmt.pr "member %s (group %s)@." (str m "me") (str m "group");
        Option.iter print_layers (field m "counters"))
      (members_of j)
  end
  else print_layers j;
  0

let one_line_text cmd text k =
  if String.contains text '\n' then Consort_cli.fail cmd "the message must be one line" else k ()

let cast path group text =
  one_line_text "cast" text @@ fun () ->
  ask "cast" path (in_group group ("cast " ^ text)) @@ fun _ _ ->
  print_endline "ok";
  0

let send path group id text =
  one_line_text "send" text @@ fun () ->
  if id = "" || String.contains id ' ' then Consort_cli.fail "send" "%S is not a member id" id
  else
    ask "send" path (in_group group (Printf.sprintf "send %s %s" id text)) @@ fun _ _ ->
    print_endline "ok";
    0

let text n =
  Arg.(required & pos n (some string) None & info [] ~docv:"TEXT" ~doc:"The message (one line).")

let commands =
  [
    Cmd.v
      (Consort_cli.info ~path:"status" "status"
         ~doc:
           "A running member's (or every member a daemon holds) group, view, members, coordinator \
            and flow state.")
      Term.(
        const status $ control_opt $ group
        $ Arg.(
            value & flag
            & info [ "all" ]
                ~doc:
                  "With $(b,--group NAME) and no $(b,--control): every member of the group, \
                   wherever it runs. Those whose control socket is on this machine (members of a \
                   consortd there included) are asked there; one of them asks every other member \
                   of its view through the group itself (side messages, sealed as the group's \
                   traffic is, 2 s to answer). Members that do not answer are named with the \
                   reason.")
        $ json);
    Cmd.v
      (Consort_cli.info ~path:"counters" "counters"
         ~doc:
           "A running member's counters, per layer (a daemon's: its own, then per member and \
            layer).")
      Term.(const counters $ control $ group $ json);
    Cmd.v
      (Consort_cli.info ~path:"cast" "cast"
         ~doc:"Cast a message to the group through a running member.")
      Term.(const cast $ control $ group $ text 0);
    Cmd.v
      (Consort_cli.info ~path:"send" "send"
         ~doc:"Send a message to one member through a running member.")
      Term.(
        const send $ control $ group
        $ Arg.(
            required
            & pos 0 (some string) None
            & info [] ~docv:"ID"
                ~doc:"The destination's member id, as $(b,consort status) prints it.")
        $ text 1);
  ]
