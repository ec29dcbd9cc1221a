open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module Seal = Consort_seal.Seal
module C = Consort_ops.Capture.Make (Udp)
module S = Seal.Make (C)
module G = Consort_group.Group.Make (S)
module Log = Consort_spec.Log

module In_channel_all = struct
  let read file =
    let ic = open_in_bin file in
    Fun.protect
      ~finally:(fun () -> close_in ic)
      (fun () -> really_input_string ic (in_channel_length ic))
end

let default_ports = List.init 16 (fun i -> 7400 + i)
let default_peers = List.map (Printf.sprintf "127.0.0.1:%d") default_ports
let digest s = String.sub (Sha256.to_hex (Sha256.string s)) 0 16

(* Members that log number their messages: each payload is "#SEQ " and
   the text, so that logs name messages by origin and number, never by
   text. Every member strips the number from what it delivers. *)
let frame seq text = Printf.sprintf "#%d %s" seq text

let unframe s =
  match String.index_opt s ' ' with
  | Some i when i > 1 && s.[0] = '#' -> (
      match int_of_string_opt (String.sub s 1 (i - 1)) with
      | Some seq when seq > 0 -> (seq, String.sub s (i + 1) (String.length s - i - 1))
      | _ -> (0, s))
  | _ -> (0, s)

(* Log times: the wall clock, in nanoseconds since the Unix epoch. *)
let now_ns () = Int64.to_int (Int64.of_float (Unix.gettimeofday () *. 1e9))

type input = No_input | Fd of Unix.file_descr

type config = {
  group : string;
  props : Consort_group.Properties.t list;
  bind : string option;
  peers : string list;
  log : string option;
  params : Params.t;
  quiet : bool;
  input : input;
  seed : int;
  drop_file : string option;
  discovery : string option;
  seal : (Consort_seal.Seal.secret * Consort_seal.Seal.mode) option;
  control : string option;
  metrics : string option;
  http : string option;
  pcap : string option;
}

type error =
  | Bad_props of string
  | Bad_params of string
  | Bad_peer of { peer : string; reason : string }
  | Bad_bind of { addr : string; reason : string }
  | Unreachable_bind of { addr : string; peer : string }
  | Log_file of string
  | No_free_port
  | Join of Consort_group.Group.join_error
  | Control of string
  | Metrics of string
  | Http of string
  | Pcap of string
  | Failed of string

let pp_error ppf = function
  | Bad_props e -> Fmt.pf ppf "--props: %s" e
  | Bad_params e -> Fmt.pf ppf "--params: %s" e
  | Bad_peer { peer; reason } -> Fmt.pf ppf "--peers: %s" (if reason = "" then peer else reason)
  | Bad_bind { addr; reason } -> Fmt.pf ppf "--bind %s: %s" addr reason
  | Unreachable_bind { addr; peer } ->
      Fmt.pf ppf
        "--bind %s: peer %s is on another host and cannot reach a loopback address; bind an \
         address of this host that it can reach"
        addr peer
  | Log_file e -> Fmt.pf ppf "cannot open the log: %s" e
  | No_free_port -> Fmt.string ppf "no free port in 127.0.0.1:7400-7415; give one with --bind"
  | Join e -> Consort_group.Group.pp_join_error ppf e
  | Control e -> Fmt.pf ppf "--control: %s" e
  | Metrics e -> Fmt.pf ppf "--metrics: %s" e
  | Http e -> Fmt.pf ppf "--http: %s" e
  | Pcap e -> Fmt.pf ppf "--pcap: %s" e
  | Failed e -> Fmt.pf ppf "%s; left the group" e

(* The IPv4 address and port of an "IP:PORT" that parsed. *)
let ip_port s =
  match String.rindex_opt s ':' with
  | None -> (0, 0)
  | Some i -> (
      let host = String.sub s 0 i and port = String.sub s (i + 1) (String.length s - i - 1) in
      match List.map int_of_string_opt (String.split_on_char '.' host) with
      | [ Some a; Some b; Some c; Some d ] ->
          ( (a lsl 24) lor (b lsl 16) lor (c lsl 8) lor d,
            Option.value ~default:0 (int_of_string_opt port) )
      | _ -> (0, 0))

let is_loopback a = fst (ip_port (Udp.address_to_string a)) lsr 24 = 127

(* A member's address is its identity: the others reach it there. *)
let check_bind addr =
  match Udp.address_of_string addr with
  | Error reason -> Error (Bad_bind { addr; reason })
  | Ok a ->
      let ip, port = ip_port (Udp.address_to_string a) in
      let bad reason = Error (Bad_bind { addr; reason }) in
      if ip = 0 then
        bad
          "a wildcard address cannot be reached by peers (a member's address is how the others \
           reach it); give an address of this host, such as 127.0.0.1:PORT or its LAN address"
      else if ip = 0xffffffff then bad "the broadcast address cannot be a member's address"
      else if ip lsr 28 = 14 then
        bad "a multicast address cannot be a member's address (see --mcast)"
      else if port = 0 then bad "port 0 picks a port peers cannot know; give a port"
      else Ok a

let check_peers peers =
  List.fold_left
    (fun acc p ->
      Result.bind acc (fun l ->
          match Udp.address_of_string p with
          | Ok a -> Ok (a :: l)
          | Error reason -> Error (Bad_peer { peer = p; reason })))
    (Ok []) peers
  |> Result.map List.rev

let check_config cfg =
  match Consort_group.Total.check_params cfg.params with
  | Error e -> Error (Bad_params e)
  | Ok () -> (
      match check_peers cfg.peers with
      | Error e -> Error e
      | Ok peers -> (
          match cfg.bind with
          | None -> Ok ()
          | Some addr -> (
              match check_bind addr with
              | Error e -> Error e
              | Ok a -> (
                  match List.find_opt (fun p -> is_loopback a && not (is_loopback p)) peers with
                  | Some p -> Error (Unreachable_bind { addr; peer = Udp.address_to_string p })
                  | None -> Ok ()))))

(* Binds the first free port of the default range, or the given address. *)
let join ?take_state ?install_state ?capture ?transitional ?primary loop cfg layers cb ~on_sent
    ~on_lost =
  let try_addr addr =
    (* With a secret, per-view keys unless seal.rekey=false. *)
    let tr =
      S.wrap
        ~rekey:(Consort.Params.bool cfg.params Seal.rekey_param)
        ~freshness:(Consort.Params.time cfg.params Seal.freshness_param)
        ~group:cfg.group (C.wrap loop capture) cfg.seal
    in
    G.join ~params:cfg.params ~peers:cfg.peers ~seed:cfg.seed ~on_sent ~on_lost
      ?discovery:cfg.discovery ?take_state ?install_state ?rekey:(S.rekey tr) ?transitional ?primary
      ~heal:(List.mem Consort_group.Properties.Heal cfg.props)
      ~layers tr ~group:cfg.group ~addr cb
  in
  match cfg.bind with
  | Some addr -> Result.map_error (fun e -> Join e) (try_addr addr)
  | None ->
      let rec go = function
        | [] -> Error No_free_port
        | p :: rest -> ( match try_addr p with Ok g -> Ok g | Error _ -> go rest)
      in
      go default_peers

(* The API call, as the application makes it: a refusal says why. *)
let api_cast g s : (unit, string) result =
  Result.map_error (Fmt.str "%a" Consort_group.Group.pp_error) (G.cast g s)

(* Lines longer than this are not cast: the rest of such a line is skipped. *)
let max_line = 1 lsl 20

(* What standard input can be: watched (a pipe, a terminal, a socket),
   read directly (a regular file: epoll refuses it, and it is always
   ready), or nothing to read (/dev/null and other descriptors epoll
   refuses). *)
type source = Watched | Read_directly | Nothing

let classify fd =
  match Unix.fstat fd with
  | exception Unix.Unix_error _ -> Nothing
  | { Unix.st_kind = Unix.S_REG; _ } -> Read_directly
  | { Unix.st_kind = Unix.S_CHR; st_rdev; _ }
    when match Unix.stat "/dev/null" with
         | { Unix.st_rdev = r; _ } -> r = st_rdev
         | exception Unix.Unix_error _ -> false ->
      Nothing
  | _ -> Watched

let status_json cfg g ~blocked ~flow_blocked : Yojson.Safe.t =
  let v = G.view g in
  `Assoc
    (Consort_ops.Control.status_fields ~group:cfg.group ~me:(G.me g) ~view:v.Consort_group.Group.vid
       ~ltime:v.ltime ~coordinator:v.coordinator ~members:(Array.to_list v.members) ~rank:v.rank
       ~blocked ~flow_blocked
    @ [
        ( "quorum",
          match G.primary g with
          | None -> `Null
          | Some q ->
              `Assoc
                [
                  ("quorate", `Bool q.Consort_group.Primary.primary);
                  ("votes", `Int q.votes);
                  ("needed", `Int q.needed);
                  ("expected", `Int q.expected);
                  ("text", `String (Fmt.str "%a" Consort_group.Primary.pp_quorum q));
                ] );
        ( "seal",
          match cfg.seal with
          | None -> `Null
          | Some (_, mode) ->
              `Assoc
                [
                  ("mode", `String (Fmt.str "%a" Seal.pp_mode mode));
                  ("rekey", `Bool (Consort.Params.bool cfg.params Seal.rekey_param));
                  ( "freshness_s",
                    `Float
                      (Consort.Time.to_sec (Consort.Params.time cfg.params Seal.freshness_param)) );
                ] );
      ])

(* Every member's status, through the group ({!G.query_status}): one entry
   per member of the view, its status or why there is none. *)
let status_all cfg g k =
  let vid = (G.view g).Consort_group.Group.vid in
  G.query_status g (function
    | Error e -> k (`Assoc [ ("error", `String e) ])
    | Ok answers ->
        k
          (`Assoc
             [
               ("group", `String cfg.group);
               ("view", `String vid);
               ( "members",
                 `List
                   (List.map
                      (fun (id, r) ->
                        match r with
                        | Ok s -> (
                            match Yojson.Safe.from_string s with
                            | j -> `Assoc [ ("me", `String id); ("status", j) ]
                            | exception Yojson.Json_error _ ->
                                `Assoc [ ("me", `String id); ("error", `String "not JSON") ])
                        | Error why -> `Assoc [ ("me", `String id); ("error", `String why) ])
                      answers) );
             ]))

(* "IP:PORT" as a socket address. *)
let inet_addr s =
  match String.rindex_opt s ':' with
  | None -> Error (Printf.sprintf "%S is not ADDR:PORT" s)
  | Some i -> (
      let host = String.sub s 0 i and port = String.sub s (i + 1) (String.length s - i - 1) in
      match (Unix.inet_addr_of_string host, int_of_string_opt port) with
      | a, Some p when p >= 0 && p <= 65535 -> Ok (Unix.ADDR_INET (a, p))
      | _ -> Error (Printf.sprintf "%S is not ADDR:PORT" s)
      | exception Failure _ -> Error (Printf.sprintf "%S is not ADDR:PORT" s))

(* Every counter, by layer: the group's and its layers', then the seal's. *)
let counters g =
  let st = S.stats (G.connection g) in
  G.counters g @ [ ("seal", Seal.stats_list st) ]

let metrics_samples cfg g ~totals ~flow_blocked =
  let labels = Consort_ops.Metrics.member_labels ~group:cfg.group (G.me g) in
  let v = G.view g in
  let gauge name help value = { Consort_ops.Metrics.name; help; kind = `Gauge; labels; value } in
  gauge "consort_view_members" "Members in the current view."
    (float_of_int (Array.length v.Consort_group.Group.members))
  :: gauge "consort_view_ltime" "Logical time of the current view (increases at each view change)."
       (float_of_int v.ltime)
  :: gauge "consort_view_rank" "This member's rank in the current view." (float_of_int v.rank)
  :: gauge "consort_flow_blocked" "1 while flow control asks the application to pause."
       (if flow_blocked then 1. else 0.)
  :: Consort_ops.Metrics.member_info ~group:cfg.group (G.me g)
  :: Consort_ops.Metrics.of_counters ~totals ~labels (counters g)

(* What the web console shows of the group: what status says, the counters,
   the quorum, the roles and the view history. The sequencer is the
   coordinator under Total's sequencer protocol; under the token protocol,
   only this member's own holding is known here. *)
let console_json cfg g ~blocked ~flow_blocked ~quorum ~history ~rates : Yojson.Safe.t =
  let cs = counters g in
  let status = match status_json cfg g ~blocked ~flow_blocked with `Assoc l -> l | _ -> [] in
  let v = G.view g in
  let total = List.mem Consort_group.Properties.Total cfg.props in
  let protocol = Consort_group.Total.protocol cfg.params in
  let holding =
    match List.assoc_opt "total" cs with
    | Some kvs -> List.assoc_opt "holding" kvs = Some 1
    | None -> false
  in
  let if_ c x = if c then Some x else None in
  let quorum =
    match quorum with
    | None -> `Null
    | Some (q : Consort_group.Primary.quorum) ->
        `Assoc
          [
            ("primary", `Bool q.primary);
            ("votes", `Int q.votes);
            ("needed", `Int q.needed);
            ("expected", `Int q.expected);
          ]
  in
  Consort_ops.Console.group_json ~status ~counters:cs ~quorum
    ~coordinator:v.Consort_group.Group.coordinator
    ~sequencer:(if_ (total && protocol = Ok Consort_group.Total.Sequencer) v.coordinator)
    ~token_holder:(if_ (total && protocol = Ok Consort_group.Total.Token && holding) (G.me g))
    history rates

(* One line: every non-zero counter, LAYER.NAME=VALUE; on standard output,
   or on standard error for a quiet member. *)
let print_counters ~quiet g =
  let items =
    List.concat_map
      (fun (layer, kvs) ->
        List.filter_map
          (fun (k, v) -> if v <> 0 then Some (Printf.sprintf "%s.%s=%d" layer k v) else None)
          kvs)
      (counters g)
  in
  let line = "counters " ^ String.concat " " items in
  if quiet then prerr_endline line else print_endline line;
  flush stdout

let current = ref []
let log_context () = !current

let run cfg =
  current := [ ("group", cfg.group) ];
  match Consort_group.Properties.layers cfg.props with
  | Error e -> Error (Bad_props (Fmt.str "%a" Consort_group.Properties.pp_error e))
  | Ok layers -> (
      match check_config cfg with
      | Error e -> Error e
      | Ok () -> (
          let loop = Loop.create () in
          let log_oc =
            match cfg.log with
            | None -> Ok None
            | Some f -> ( try Ok (Some (open_out f)) with Sys_error e -> Error e)
          in
          match log_oc with
          | Error e -> Error (Log_file e)
          | Ok log_oc -> (
              (* Fail-stop: the first write that fails (a full disk, an I/O
                 error, a closed standard output) or callback that raises
                 stops the member: nothing more is written or cast, it
                 leaves the group (from [poll], on the loop), and [run] ends
                 with the reason (one line, exit 2). *)
              let failure = ref None in
              let fail why = if !failure = None then failure := Some why in
              let write e =
                match log_oc with
                | Some oc when !failure = None -> (
                    try
                      output_string oc (Log.to_line e);
                      output_char oc '\n';
                      flush oc
                    with Sys_error why ->
                      fail (Printf.sprintf "cannot write the log %s: %s" (Option.get cfg.log) why))
                | _ -> ()
              in
              Loop.on_error loop (function Loop.Timer e | Loop.Descriptor (_, e) ->
                  fail (Printf.sprintf "internal error: %s" (Printexc.to_string e)));
              let say fmt =
                Printf.ksprintf
                  (fun s ->
                    if (not cfg.quiet) && !failure = None then
                      try
                        print_endline s;
                        flush stdout
                      with Sys_error why ->
                        fail (Printf.sprintf "cannot write standard output: %s" why))
                  fmt
              in
              let self = ref "" and g_ref = ref None and exited = ref false in
              let blocked = ref false and flow_blocked = ref false in
              let totals = Consort_ops.Metrics.totals () in
              let history = Consort_ops.Console.history () and quorum = ref None in
              let rates = Consort_ops.Console.rates () in
              let cast_ref = ref (fun _ -> Error "not in the group yet") in
              let send_ref = ref (fun _ _ -> Error "not in the group yet") in
              let leave_ref = ref (fun () -> ()) in
              let vid () =
                match !g_ref with Some g -> (G.view g).Consort_group.Group.vid | None -> ""
              in
              let last_vid = ref "" in
              (* With Xfer, the member's state: how many casts it has applied and
             the XOR of their digests (the same whatever the order of
             delivery, so members agree without total order). *)
              let xfer = List.mem Consort_group.Properties.Xfer cfg.props in
              let applied = ref 0 and sum = Bytes.make 16 '\000' in
              let state () =
                Printf.sprintf "%d %s" !applied (Digest.to_hex (Bytes.to_string sum))
              in
              let apply s =
                incr applied;
                let d = Digest.string s in
                Bytes.iteri
                  (fun i c -> Bytes.set sum i (Char.chr (Char.code c lxor Char.code d.[i])))
                  sum
              in
              let install_state s =
                match String.split_on_char ' ' s with
                | [ n; hex ] when int_of_string_opt n <> None && String.length hex = 32 -> (
                    match Digest.from_hex hex with
                    | d ->
                        applied := int_of_string n;
                        Bytes.blit_string d 0 sum 0 16;
                        say "state installed: %d casts, digest %s" !applied hex
                    | exception Invalid_argument _ -> say "state refused: not a digest: %S" s)
                | _ -> say "state refused: %S is not COUNT DIGEST" s
              in
              let deliver kind ~origin s =
                let seq, s = unframe s in
                say "%s from %s: %s" (match kind with `Cast -> "cast" | `Send -> "send") origin s;
                if xfer && kind = `Cast then apply s;
                write
                  (Log.Deliver
                     {
                       t = now_ns ();
                       me = !self;
                       view = (match !g_ref with Some g -> G.delivery_view g | None -> vid ());
                       from = origin;
                       kind;
                       seq;
                       len = String.length s;
                       digest = digest s;
                     })
              in
              let cb =
                {
                  Consort_group.Group.view =
                    (fun v ->
                      blocked := false;
                      self := v.members.(v.rank);
                      last_vid := v.vid;
                      current := [ ("member", !self); ("group", cfg.group); ("view", v.vid) ];
                      Consort_ops.Console.record history
                        {
                          t = Unix.gettimeofday ();
                          vid = v.vid;
                          ltime = v.ltime;
                          members = Array.to_list v.members;
                          coordinator = v.coordinator;
                          changes =
                            Consort_ops.Console.changes ~joined:v.joined ~left:v.left ~why:v.why;
                        };
                      say "view %s: %s (rank %d; joined [%s], left [%s])" v.vid
                        (String.concat " " (Array.to_list v.members))
                        v.rank (String.concat " " v.joined) (String.concat " " v.left);
                      List.iter (fun (who, why) -> say "%s %s" who why) v.why;
                      if xfer then say "state: %s" (state ());
                      write
                        (Log.View
                           {
                             t = now_ns ();
                             me = !self;
                             view = v.vid;
                             members = Array.to_list v.members;
                           }));
                  cast = deliver `Cast;
                  send = deliver `Send;
                  block =
                    (fun () ->
                      blocked := true;
                      Option.iter (fun g -> Consort_ops.Metrics.observe totals (counters g)) !g_ref;
                      write (Log.Block { t = now_ns (); me = !self; view = vid () }));
                  flow =
                    (fun b ->
                      flow_blocked := b;
                      if b then say "flow control: sending paused"
                      else say "flow control: sending resumed");
                  exit =
                    (fun () ->
                      exited := true;
                      say "left the group";
                      write (Log.Exit { t = now_ns (); me = !self }));
                }
              in
              let on_sent ~vid kind s =
                let seq, s = unframe s in
                let t = now_ns () and me = !self and len = String.length s in
                match kind with
                | `Cast -> write (Log.Cast { t; me; view = vid; seq; len; digest = digest s })
                | `Send dst ->
                    write (Log.Send { t; me; view = vid; dst; seq; len; digest = digest s })
              in
              (* With Evs, the transitional views are printed and logged. *)
              let transitional =
                if List.mem Consort_group.Properties.Evs cfg.props then
                  Some
                    (fun (tv : Consort_group.Group.transitional) ->
                      say "%s" (Fmt.str "%a" Consort_group.Group.pp_transitional tv);
                      write
                        (Log.Trans
                           {
                             t = now_ns ();
                             me = !self;
                             view = tv.ending;
                             next = (if tv.next = "" then None else Some tv.next);
                             members = Array.to_list tv.survivors;
                           }))
                else None
              in
              (* With Primary, each view's decision is printed and logged. *)
              let primary (q : Consort_group.Primary.quorum) =
                quorum := Some q;
                say "%s" (Fmt.str "view %s is %a" !last_vid Consort_group.Primary.pp_quorum q);
                write
                  (Log.Quorum
                     {
                       t = now_ns ();
                       me = !self;
                       view = !last_vid;
                       primary = q.primary;
                       votes = q.votes;
                       needed = q.needed;
                     })
              in
              let on_lost kind s reason =
                let seq, _ = unframe s in
                say "lost: %s" reason;
                write
                  (Log.Lost
                     {
                       t = now_ns ();
                       me = !self;
                       kind = (match kind with `Cast -> `Cast | `Send _ -> `Send);
                       seq;
                       reason;
                     })
              in
              (* The control socket and the metrics port, open before the join
             so that a path in use or a port taken is refused up front. *)
              let ops_closers = ref [] in
              let close_ops () = List.iter (fun f -> f ()) !ops_closers in
              (* An ops server (metrics, console) at [addr], kept to be closed; where it listens
                 said by [say]. *)
              let serve_ops addr ~error ~say start =
                match inet_addr addr with
                | Error e -> Error (error e)
                | Ok sa -> (
                    match start sa with
                    | Ok s ->
                        ops_closers := (fun () -> Consort_ops.Serve.close s) :: !ops_closers;
                        say
                          (match Consort_ops.Serve.address s with
                          | ADDR_INET (a, p) ->
                              Printf.sprintf "%s:%d" (Unix.string_of_inet_addr a) p
                          | ADDR_UNIX p -> p);
                        Ok ()
                    | Error e -> Error (error e))
              in
              let opened =
                let control =
                  match cfg.control with
                  | None -> Ok ()
                  | Some path -> (
                      let joined f =
                        match !g_ref with Some g -> f g | None -> Error "not in the group yet"
                      in
                      let handler =
                        {
                          Consort_ops.Control.status =
                            (fun () ->
                              match !g_ref with
                              | Some g ->
                                  status_json cfg g ~blocked:!blocked ~flow_blocked:!flow_blocked
                              | None ->
                                  `Assoc [ ("group", `String cfg.group); ("joined", `Bool false) ]);
                          counters =
                            (fun () -> match !g_ref with Some g -> counters g | None -> []);
                          cast = (fun text -> joined (fun _ -> !cast_ref text));
                          send = (fun id text -> joined (fun _ -> !send_ref id text));
                          suspect = (fun ids -> Option.iter (fun g -> G.suspect g ids) !g_ref);
                          leave = (fun () -> !leave_ref ());
                          status_all =
                            (fun k ->
                              match !g_ref with
                              | None -> k (`Assoc [ ("error", `String "not in the group yet") ])
                              | Some g -> status_all cfg g k);
                        }
                      in
                      match Consort_ops.Control.serve loop path handler with
                      | Ok s ->
                          ops_closers := (fun () -> Consort_ops.Serve.close s) :: !ops_closers;
                          Ok ()
                      | Error e -> Error (Control e))
                in
                match control with
                | Error e -> Error e
                | Ok () -> (
                    match cfg.metrics with
                    | None -> Ok ()
                    | Some addr ->
                        let samples () =
                          match !g_ref with
                          | Some g -> metrics_samples cfg g ~totals ~flow_blocked:!flow_blocked
                          | None -> []
                        in
                        serve_ops addr
                          ~error:(fun e -> Metrics e)
                          ~say:(say "metrics at http://%s/metrics")
                          (fun sa -> Consort_ops.Metrics.serve loop sa samples))
              in
              let opened =
                Result.bind opened (fun () ->
                    match cfg.http with
                    | None -> Ok ()
                    | Some addr ->
                        let groups () =
                          match !g_ref with
                          | Some g ->
                              [
                                console_json cfg g ~blocked:!blocked ~flow_blocked:!flow_blocked
                                  ~quorum:!quorum ~history ~rates;
                              ]
                          | None ->
                              [ `Assoc [ ("group", `String cfg.group); ("joined", `Bool false) ] ]
                        in
                        serve_ops addr
                          ~error:(fun e -> Http e)
                          ~say:(say "console at http://%s/")
                          (fun sa ->
                            Consort_ops.Console.serve loop sa ~node:"consort member" groups))
              in
              let capture =
                match cfg.pcap with
                | None -> Ok None
                | Some path -> (
                    match Consort_ops.Capture.create path with
                    | Ok w ->
                        ops_closers := (fun () -> Consort_ops.Capture.close w) :: !ops_closers;
                        Ok (Some w)
                    | Error e -> Error (Pcap e))
              in
              let opened = Result.bind opened (fun () -> Result.map ignore capture) in
              let capture = match capture with Ok c -> c | Error _ -> None in
              match
                Result.bind opened (fun () ->
                    join ~take_state:state ~install_state ?capture ?transitional ~primary loop cfg
                      layers cb ~on_sent ~on_lost)
              with
              | Error e ->
                  close_ops ();
                  Option.iter close_out_noerr log_oc;
                  Error e
              | Ok g -> (
                  g_ref := Some g;
                  G.set_status_handler g (fun () ->
                      Yojson.Safe.to_string
                        (status_json cfg g ~blocked:!blocked ~flow_blocked:!flow_blocked));
                  (* Each line is a message, numbered from 1. *)
                  let next_seq = ref 0 in
                  let cast_line text =
                    if !failure <> None then Error "the member is stopping"
                    else begin
                      incr next_seq;
                      let seq = !next_seq in
                      let payload = if cfg.log = None then text else frame seq text in
                      match api_cast g payload with
                      | Ok () -> Ok ()
                      | Error reason ->
                          say "cast refused: %s" reason;
                          write
                            (Log.Refused
                               {
                                 t = now_ns ();
                                 me = G.me g;
                                 view = vid ();
                                 kind = `Cast;
                                 dst = None;
                                 seq;
                                 len = String.length text;
                                 digest = digest text;
                                 reason;
                               });
                          Error reason
                    end
                  in
                  let send_line id text =
                    incr next_seq;
                    let payload = if cfg.log = None then text else frame !next_seq text in
                    Result.map_error
                      (Fmt.str "%a" Consort_group.Group.pp_error)
                      (G.send g id payload)
                  in
                  (* The control socket's cast answers with the member's own
                     answer: a refusal (not primary, flow control, too big,
                     leaving) reaches the operator. *)
                  cast_ref := cast_line;
                  send_ref := send_line;
                  say "member %s of group %s, stack %s" (G.me g) cfg.group (Stack.describe layers);
                  let leaving = ref false in
                  let leave () =
                    if not !leaving then begin
                      leaving := true;
                      G.leave g
                    end
                  in
                  leave_ref := leave;
                  let term = ref false and usr1 = ref false in
                  Sys.set_signal Sys.sigterm (Sys.Signal_handle (fun _ -> term := true));
                  Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> term := true));
                  Sys.set_signal Sys.sigusr1 (Sys.Signal_handle (fun _ -> usr1 := true));
                  let rec poll () =
                    (match capture with
                    | Some w -> (
                        match Consort_ops.Capture.error w with
                        | Some e -> fail (Printf.sprintf "--pcap %s: %s" (Option.get cfg.pcap) e)
                        | None -> ())
                    | None -> ());
                    if !term || !failure <> None then leave ();
                    if !usr1 then begin
                      usr1 := false;
                      print_counters ~quiet:cfg.quiet g
                    end;
                    if not !exited then ignore (Loop.after loop (Time.of_ms 20) poll)
                  in
                  poll ();
                  (* With the console, the rates it charts: a sample a second. *)
                  if cfg.http <> None then begin
                    let rec tick () =
                      (match List.assoc_opt "group" (G.counters g) with
                      | Some kvs ->
                          let get k = Option.value ~default:0 (List.assoc_opt k kvs) in
                          Consort_ops.Console.sample rates ~t:(Unix.gettimeofday ())
                            ~sent:(get "sent") ~delivered:(get "delivered")
                      | None -> ());
                      if not !exited then ignore (Loop.after loop (Time.of_sec 1.) tick)
                    in
                    tick ()
                  end;
                  (* A test's partition: drop datagrams from the addresses
                 listed in the file, re-read as it changes. *)
                  (match cfg.drop_file with
                  | None -> ()
                  | Some file ->
                      let last = ref "" in
                      let rec watch_file () =
                        let contents = try In_channel_all.read file with Sys_error _ -> "" in
                        if contents <> !last then begin
                          last := contents;
                          let blocked =
                            List.filter (( <> ) "")
                              (List.map String.trim (String.split_on_char '\n' contents))
                          in
                          let filter =
                            if blocked = [] then None
                            else Some (fun ~src _ -> List.mem (Udp.address_to_string src) blocked)
                          in
                          say "dropping datagrams from [%s]" (String.concat " " blocked);
                          ignore (S.control (G.connection g) (S.Drop_filter filter))
                        end;
                        if not !exited then ignore (Loop.after loop (Time.of_ms 50) watch_file)
                      in
                      watch_file ());
                  (* Standard input: each line is a cast; the end leaves. *)
                  (match cfg.input with
                  | No_input -> ()
                  | Fd fd -> (
                      let buf = Buffer.create 256 and chunk = Bytes.create 65536 in
                      let skipping = ref false in
                      let too_long () =
                        Printf.eprintf
                          "consort member: standard input: a line longer than %d bytes is not cast\n\
                           %!"
                          max_line
                      in
                      let rec lines () =
                        let s = Buffer.contents buf in
                        match String.index_opt s '\n' with
                        | Some i ->
                            let line = String.sub s 0 i in
                            Buffer.clear buf;
                            Buffer.add_string buf (String.sub s (i + 1) (String.length s - i - 1));
                            if !skipping then skipping := false
                            else if String.length line > max_line then too_long ()
                            else if line <> "" then ignore (cast_line line);
                            lines ()
                        | None ->
                            if Buffer.length buf > max_line then begin
                              if not !skipping then too_long ();
                              skipping := true;
                              Buffer.clear buf
                            end
                      in
                      let at_end () =
                        if Buffer.length buf > max_line then too_long ()
                        else if Buffer.length buf > 0 && not !skipping then
                          ignore (cast_line (Buffer.contents buf));
                        Buffer.clear buf;
                        leave ()
                      in
                      (* [true] while there is more to read. *)
                      let read_once () =
                        match Unix.read fd chunk 0 (Bytes.length chunk) with
                        | 0 ->
                            at_end ();
                            false
                        | n ->
                            Buffer.add_subbytes buf chunk 0 n;
                            lines ();
                            true
                        | exception
                            Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) ->
                            true
                        | exception Unix.Unix_error (e, _, _) ->
                            say "standard input: %s; leaving" (Unix.error_message e);
                            leave ();
                            false
                      in
                      let read_directly () =
                        (* A chunk at a time, so that the group runs between. *)
                        let rec step () =
                          if read_once () && not !exited then
                            ignore (Loop.after loop (Time.of_ms 1) step)
                        in
                        step ()
                      in
                      match classify fd with
                      | Nothing -> ()
                      | Read_directly -> read_directly ()
                      | Watched -> (
                          (try Unix.set_nonblock fd with Unix.Unix_error _ -> ());
                          match
                            Loop.watch loop fd (fun () ->
                                if not (read_once ()) then Loop.unwatch loop fd)
                          with
                          | () -> ()
                          | exception Unix.Unix_error _ ->
                              (* Not pollable after all (epoll refuses it):
                             read it as a file. *)
                              read_directly ())));
                  Loop.run loop ~until:(fun () -> !exited);
                  close_ops ();
                  (match capture with
                  | Some w -> (
                      match Consort_ops.Capture.error w with
                      | Some e -> fail (Printf.sprintf "--pcap %s: %s" (Option.get cfg.pcap) e)
                      | None -> ())
                  | None -> ());
                  (if (not cfg.quiet) && !failure = None then
                     try print_counters ~quiet:false g
                     with Sys_error why ->
                       fail (Printf.sprintf "cannot write standard output: %s" why));
                  Option.iter
                    (fun oc ->
                      try close_out oc
                      with Sys_error why ->
                        close_out_noerr oc;
                        fail (Printf.sprintf "cannot write the log %s: %s" (Option.get cfg.log) why))
                    log_oc;
                  match !failure with None -> Ok () | Some why -> Error (Failed why)))))
