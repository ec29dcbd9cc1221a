(* The migration feature of the group runtime: this member's moves and the
   connections it left, and the moves of others it accepted (see
   group_migration.mli and migrate.mli for the protocol). *)

open Consort
module Log = Group_log.Log

let index_where p l =
  let rec go i = function [] -> None | x :: rest -> if p x then Some i else go (i + 1) rest in
  go 0 l

module Make (T : Transport.S) = struct
  module B = Bundle.Make (T)

  type conn = B.connection

  type t = {
    group : string;
    me : string;
    drain : Time.t; (* group.migrate_drain *)
    timeout : Time.t; (* group.migrate_timeout *)
    retry : Time.t; (* group.install_retry *)
    mutable moves : int; (* this member's moves so far ({!Migrate}) *)
    mutable unmoved : (string * B.connection) list;
        (* members of the view that have not acknowledged this member's
           latest move, with the connection they know it at *)
    mutable old_conns : (B.connection * Time.t) list;
        (* connections left, open until this deadline *)
    mutable move_sent : Time.t; (* when the move was last told *)
    mutable move_back : (B.connection * Time.t) option;
        (* the latest move, not yet acknowledged by anyone: the connection it
           left, and until when to wait before going back to it *)
    mutable moves_back : int;
    known_moves : (string, int * T.address) Hashtbl.t;
        (* the latest move accepted, and its address, by member of the view *)
    mutable prev_vid : string; (* the view before the current one, [""] if none *)
    mutable move_refused : int;
    mutable move_garbage : int;
  }

  let create ~group ~me ~drain ~timeout ~retry =
    {
      group;
      me;
      drain;
      timeout;
      retry;
      moves = 0;
      unmoved = [];
      old_conns = [];
      move_sent = 0;
      move_back = None;
      moves_back = 0;
      known_moves = Hashtbl.create 8;
      prev_vid = "";
      move_refused = 0;
      move_garbage = 0;
    }

  let unmoved t = List.map fst t.unmoved
  let garbage t = t.move_garbage <- t.move_garbage + 1

  let counters t =
    [
      ("moves", t.moves);
      ("move_refused", t.move_refused);
      ("moves_back", t.moves_back);
      ("move_garbage", t.move_garbage);
    ]

  (* The connection to answer [dst] from: a member that has not yet heard
     of this member's move knows it at its old address (an Install it
     checks comes from there), while that is open; anyone else, the
     current one. *)
  let conn_for t ~view ~conn dst =
    match view with
    | Some ((v : View.t), addrs) when t.unmoved <> [] -> (
        let known_at =
          List.find_map
            (fun (eid, kc) ->
              match index_where (String.equal eid) (Array.to_list v.members) with
              | Some r
                when T.equal_address addrs.(r) dst
                     && List.exists (fun (oc, _) -> oc == kc) t.old_conns ->
                  Some kc
              | _ -> None)
            t.unmoved
        in
        match known_at with Some kc -> kc | None -> conn)
    | _ -> conn

  (* This member's latest move, told in its view and the one before (a
     member may not have installed the current one yet). *)
  let move_msg t (v : View.t) ~addr =
    Migrate.Move
      {
        group = t.group;
        vids = v.id :: (if t.prev_vid = "" then [] else [ t.prev_vid ]);
        eid = t.me;
        seq = t.moves;
        addr;
      }

  let send_moves t ~now ~view:((v : View.t), addrs) ~addr ~send =
    if t.unmoved <> [] then begin
      t.move_sent <- now;
      let msg = move_msg t v ~addr in
      List.iter
        (fun (eid, _) ->
          match index_where (String.equal eid) (Array.to_list v.members) with
          | Some r when r <> v.rank -> send addrs.(r) msg
          | _ -> ())
        t.unmoved
    end

  (* Old connections that no member still needs, or past their time.
     While a view change is under way, members of other partitions may
     know this member at an old address (a merge request it sent from
     there): they are kept until the next view is installed. *)
  let close_old t ~now ~changing =
    let keep, gone =
      List.partition
        (fun (oc, deadline) ->
          now <= deadline
          && (changing
             || List.exists (fun (_, kc) -> kc == oc) t.unmoved
             (* The address to go back to if nothing reaches the new one. *)
             || match t.move_back with Some (mb, _) -> mb == oc | None -> false))
        t.old_conns
    in
    t.old_conns <- keep;
    List.iter
      (fun (oc, _) ->
        Log.info (fun m ->
            m "%s: closes the address it moved from, %a" t.me T.pp_address (B.query oc).B.local);
        B.close oc)
      gone

  let close_all t =
    let old = t.old_conns in
    t.old_conns <- [];
    t.unmoved <- [];
    List.iter (fun (oc, _) -> B.close oc) old

  (* At most this many old connections stay open: a member that moves
     again and again closes the oldest. *)
  let max_old = 4

  (* This member moved from connection [old] to one at [local]; [members]:
     those of its view, if any, each to be told (at the connection it knew
     this member at before, if it had not heard of an earlier move yet, else
     at [old]). *)
  let moved t ~now ~old ~local ~members =
    t.moves <- t.moves + 1;
    t.old_conns <- (old, now + t.drain) :: t.old_conns;
    t.move_back <- Some (old, now + t.timeout);
    if List.length t.old_conns > max_old then begin
      let keep = List.filteri (fun i _ -> i < max_old) t.old_conns in
      List.iter
        (fun (oc, _) -> if not (List.exists (fun (k, _) -> k == oc) keep) then B.close oc)
        t.old_conns;
      t.old_conns <- keep
    end;
    Log.info (fun m -> m "%s: moves to %a (move %d)" t.me T.pp_address local t.moves);
    match members with
    | Some eids ->
        t.unmoved <-
          List.filter_map
            (fun e ->
              if e = t.me then None
              else Some (e, match List.assoc_opt e t.unmoved with Some kc -> kc | None -> old))
            (Array.to_list eids)
    | None -> ()

  (* No member acknowledged the latest move in time: nothing reaches the
     new address. The member goes back to the connection it left (still
     open), as a new move told to everyone, and closes the new one, rather
     than be cut out of the group. [switch] makes [oc] the member's
     connection again (before [bad] closes, so that its closing does not end
     the member); [members]: those of its view, if any, each to be told. *)
  let go_back t ~bad ~switch ~members oc =
    let local = (B.query oc).B.local in
    t.move_back <- None;
    t.moves_back <- t.moves_back + 1;
    Log.warn (fun m ->
        m "%s: no member acknowledged its move to %a within %.1f s; back at %a" t.me T.pp_address
          (B.query bad).B.local (Time.to_sec t.timeout) T.pp_address local);
    switch oc local;
    t.moves <- t.moves + 1;
    t.old_conns <- List.filter (fun (k, _) -> k != oc && k != bad) t.old_conns;
    B.close bad;
    t.unmoved <-
      (match members with
      | Some eids ->
          List.filter_map (fun e -> if e = t.me then None else Some (e, oc)) (Array.to_list eids)
      | None -> [])

  (* {1 At a view boundary} *)

  (* The addresses of view [members] ([addrs], by rank, this member's at
     [rank] already its own): a member whose move this member took is
     where the move says (the view's maker may have known an older address;
     a later move, the mover tells this member itself). *)
  let addresses t ~rank ~members addrs =
    List.iteri
      (fun r eid ->
        match Hashtbl.find_opt t.known_moves eid with
        | Some (_, a) when r <> rank -> addrs.(r) <- a
        | _ -> ())
      members

  (* View [eids] is installed after view [prev_vid]; [stale]: it was made
     with this member's address before its latest move, [at_old_addr] that
     address, [conn] the member's connection. *)
  let install t ~prev_vid ~eids ~stale ~at_old_addr ~conn =
    t.prev_vid <- prev_vid;
    Hashtbl.filter_map_inplace
      (fun eid seq -> if Array.mem eid eids then Some seq else None)
      t.known_moves;
    (* Members that have not heard of this member's move: those of the new
       view that had not acknowledged it, and every other one if the view
       was made with its old address. *)
    if t.moves > 0 then begin
      let others = List.filter (fun e -> e <> t.me) (Array.to_list eids) in
      let at_old addr =
        match
          List.find_opt (fun (oc, _) -> T.address_to_string (B.query oc).B.local = addr) t.old_conns
        with
        | Some (oc, _) -> oc
        | None -> conn
      in
      t.unmoved <-
        List.filter_map
          (fun e ->
            match List.assoc_opt e t.unmoved with
            | Some kc -> Some (e, kc)
            | None -> if stale then Some (e, at_old at_old_addr) else None)
          others
    end

  (* {1 Periodic work} *)

  (* [go_back oc] when the latest move is not acknowledged in time and [oc]
     is still open; [send_moves ()] when the move is due to be told again;
     [close_old ()] while old connections are open. *)
  let tick t ~now ~go_back ~send_moves ~close_old =
    (match t.move_back with
    | Some (oc, deadline) when now >= deadline ->
        if t.unmoved <> [] && List.exists (fun (k, _) -> k == oc) t.old_conns then go_back oc
        else t.move_back <- None
    | _ -> ());
    if t.unmoved <> [] && now >= t.move_sent + t.retry then send_moves ();
    if t.old_conns <> [] then close_old ()

  (* {1 Messages} *)

  (* Another member moved, or acknowledges this member's move. *)
  let on_msg t ~view ~src ~send ~close_old ~moved (m : Migrate.t) =
    match (m, view) with
    | _ when Migrate.group m <> t.group -> t.move_garbage <- t.move_garbage + 1
    | Migrate.Moved { mover; seq; eid; _ }, view ->
        (* From the member it names, where this member sends to it, as a
           [Move] is judged: a stranger cannot acknowledge for a member
           that never heard of the move. *)
        let from_named =
          match view with
          | Some ((v : View.t), addrs) -> (
              match index_where (String.equal eid) (Array.to_list v.members) with
              | Some r -> T.equal_address addrs.(r) src
              | None -> false)
          | None -> false
        in
        if not from_named then begin
          t.move_refused <- t.move_refused + 1;
          Log.info (fun m ->
              m "%s: an acknowledgement of its move for %s from %a refused: not where %s is" t.me
                eid T.pp_address src eid)
        end
        else if mover = t.me && seq = t.moves && List.mem_assoc eid t.unmoved then begin
          (* Something reaches the new address: no going back. *)
          t.move_back <- None;
          t.unmoved <- List.remove_assoc eid t.unmoved;
          if t.unmoved = [] then Log.info (fun m -> m "%s: every member knows its move %d" t.me seq);
          close_old ()
        end
    | Migrate.Move { eid; seq; _ }, Some ((v : View.t), addrs) -> (
        let known = match Hashtbl.find_opt t.known_moves eid with Some (k, _) -> k | None -> 0 in
        match
          Migrate.judge ~me:t.me ~vid:v.id ~prev_vid:t.prev_vid ~members:v.members ~known
            ~src:(T.address_to_string src) m
        with
        | Migrate.Refuse why ->
            t.move_refused <- t.move_refused + 1;
            Log.info (fun m -> m "%s: a move from %a refused: %s" t.me T.pp_address src why)
        | Migrate.Accept ->
            Hashtbl.replace t.known_moves eid (seq, src);
            (match index_where (String.equal eid) (Array.to_list v.members) with
            | Some r when not (T.equal_address addrs.(r) src) ->
                Log.info (fun m -> m "%s: %s moved to %a (move %d)" t.me eid T.pp_address src seq);
                moved r eid
            | _ -> ());
            send src (Migrate.Moved { group = t.group; mover = eid; seq; eid = t.me }))
    | Migrate.Move _, None -> ()
end
