(* vsync-forged: a group under a stream of forged datagrams. *)

open Consort
module Sim = Consort_engine.Sim
module V = Vsync_sim
module G = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))
module Sealed = Consort_seal.Seal.Make (Sim)
module Bottom = Consort_group.Bottom
module Suspect = Consort_group.Suspect
module Mnak = Consort_group.Mnak
module Pt2pt = Consort_group.Pt2pt

let enc = Codec.encode_string

(* The headers under [target] that carry a datagram up to it, given the
   stack's layer names (top first): Bottom's with the group stamp, claimed
   origin and kind (a send to rank [dst]), then each pass-through header. [None] when a layer
   under the target is one the forger cannot pass. *)
let under ~dst ~layers ~target ~stamp ~origin ~cast =
  let rec go acc = function
    | [] -> None
    | l :: _ when l = target -> Some (String.concat "" (List.rev acc))
    | l :: rest -> (
        let h =
          if l = Bottom.name then
            Some
              (enc Bottom.codec
                 (if cast then Bottom.Cast { group = stamp; origin }
                  else Bottom.Send { group = stamp; origin; dst }))
          else if l = Suspect.name then Some (enc Suspect.codec Suspect.No_hdr)
          else if l = Mnak.name then Some (enc Mnak.codec Mnak.No_hdr)
          else if l = Pt2pt.name then Some (enc Pt2pt.codec Pt2pt.No_hdr)
          else None
        in
        match h with Some h -> go (h :: acc) rest | None -> None)
  in
  go [] (List.rev layers)

(* A varint the codec refuses: nine bytes whose value sets the sign bit. *)
let negative = String.make 8 '\xff' ^ "\x7f"

type kind =
  | Data_huge  (** Mnak cast numbered far beyond any window *)
  | Retrans_huge
  | Nak_forged  (** NAKs for ranges up to max_int, in a storm from one asker *)
  | Status_huge  (** vectors of huge counts; the receiver's own entry 0 *)
  | Status_impossible  (** the receiver's own entry beyond what it made *)
  | Pt2pt_huge  (** point-to-point numbered far beyond the window *)
  | Pt2pt_ack  (** acknowledging messages never sent *)
  | Wrong_group
  | Bad_origin  (** the receiver's own rank, or outside the view *)
  | Truncated
  | Negative  (** a varint that overflows to a negative number *)

let kinds =
  [|
    Data_huge;
    Retrans_huge;
    Nak_forged;
    Status_huge;
    Status_impossible;
    Pt2pt_huge;
    Pt2pt_ack;
    Wrong_group;
    Bad_origin;
    Truncated;
    Negative;
  |]

let huge rng =
  match Rng.int rng 4 with
  | 0 -> max_int
  | 1 -> max_int - Rng.int rng 1000
  | 2 -> (1 lsl 40) + Rng.int rng 1000
  | _ -> (1 lsl 21) + Rng.int rng (1 lsl 20)

(* Bytes of one forgery of [kind] for the member of rank [target], as if
   from [origin]; [None] if this stack cannot be reached that way. *)
let rec forge rng kind ~layers ~(view : View.t) ~stack ~target ~origin =
  let n = View.nmembers view and stamp = Bottom.stamp view ~stack in
  let mnak ?(stamp = stamp) ?(origin = origin) ~cast h =
    Option.map
      (fun p -> p ^ enc Mnak.codec h)
      (under ~dst:target ~layers ~target:Mnak.name ~stamp ~origin ~cast)
  in
  let pt2pt h =
    Option.map
      (fun p -> p ^ enc Pt2pt.codec h)
      (under ~dst:target ~layers ~target:Pt2pt.name ~stamp ~origin ~cast:false)
  in
  let valid_rank () = Rng.int rng n in
  match kind with
  | Data_huge -> mnak ~cast:true (Mnak.Data { seq = huge rng })
  | Retrans_huge -> mnak ~cast:false (Mnak.Retrans { origin = valid_rank (); seq = huge rng })
  | Nak_forged ->
      let range () =
        match Rng.int rng 3 with
        | 0 -> (0, max_int)
        | 1 -> (max_int, max_int)
        | _ -> (huge rng, Rng.int rng 10)
      in
      mnak ~cast:false
        (Mnak.Nak
           { origin = valid_rank (); ranges = List.init (1 + Rng.int rng 4) (fun _ -> range ()) })
  | Status_huge ->
      let vector =
        Array.init n (fun o -> if o = target then 0 else if Rng.bool rng then huge rng else 0)
      in
      mnak ~cast:true (Mnak.Status { busy = Rng.bool rng; vector })
  | Status_impossible ->
      let vector = Array.init n (fun o -> if o = target then huge rng else Rng.int rng 3) in
      mnak ~cast:true (Mnak.Status { busy = Rng.bool rng; vector })
  | Pt2pt_huge -> pt2pt (Pt2pt.Data { seq = huge rng; ack = 0 })
  | Pt2pt_ack ->
      if Rng.bool rng then pt2pt (Pt2pt.Ack { ack = huge rng; sack = [] })
      else pt2pt (Pt2pt.Data { seq = 0; ack = huge rng })
  | Wrong_group ->
      mnak
        ~stamp:(stamp lxor (1 + Rng.int rng 0xffff) land 0xffff_ffff)
        ~cast:true
        (Mnak.Data { seq = 0 })
  | Bad_origin ->
      let origin = if Rng.bool rng then target else n + Rng.int rng 1000 in
      mnak ~origin ~cast:true (Mnak.Data { seq = 0 })
  | Truncated -> (
      let k = kinds.(Rng.int rng 7) in
      match forge rng k ~layers ~view ~stack ~target ~origin with
      | Some s when String.length s > 1 ->
          Some (String.sub s 0 (1 + Rng.int rng (String.length s - 1)))
      | other -> other)
  | Negative ->
      Option.map
        (fun p ->
          if Rng.bool rng then p ^ "\x01" ^ negative
          else p ^ "\x04\x01" ^ String.make 1 (Char.chr n) ^ negative)
        (under ~dst:target ~layers ~target:Mnak.name ~stamp ~origin ~cast:true)

(* Counters summed over every stack a member had: the largest value seen
   of each, by member and view. *)
type tally = {
  seen : (string * string * string, int) Hashtbl.t; (* (member, view, layer.counter) *)
  mutable peak_mnak : int;
  mutable peak_pt2pt : int;
  mutable last_repair : Time.t; (* last time a NAK or status went out *)
  mutable last_view : Time.t;
  mutable views : int;
}

let sample w t =
  let now = Sim.now (V.net w) in
  if V.views w <> t.views then begin
    t.views <- V.views w;
    t.last_view <- now
  end;
  for i = 0 to V.nprocs w - 1 do
    match V.member w i with
    | None -> ()
    | Some (eid, st) ->
        let vid = (Stack.view st).View.id in
        List.iter
          (fun (layer, cs) ->
            List.iter
              (fun (c, v) ->
                let key = (eid, vid, layer ^ "." ^ c) in
                let old = Option.value (Hashtbl.find_opt t.seen key) ~default:0 in
                if v > old then begin
                  Hashtbl.replace t.seen key v;
                  if layer = Mnak.name && (c = "naks_sent" || c = "status_sent") then
                    t.last_repair <- now
                end;
                if layer = Mnak.name && c = "buffered" then t.peak_mnak <- max t.peak_mnak v;
                if layer = Pt2pt.name && (c = "buffered" || c = "unacked") then
                  t.peak_pt2pt <- max t.peak_pt2pt v)
              cs)
          (Stack.counters st)
  done

let total t names =
  Hashtbl.fold (fun (_, _, c) v acc -> if List.mem c names then acc + v else acc) t.seen 0

let garbage t =
  Hashtbl.fold
    (fun (_, _, c) v acc -> if Filename.extension c = ".garbage" then acc + v else acc)
    t.seen 0

(* Bounds asserted: what a member buffers never grows with the forgeries. *)
let max_mnak_buffered = 512
let max_pt2pt_buffered = 256
let settle = Time.of_sec 3.

let scenario ?trace ?params seed =
  let s = Time.of_sec in
  let w = V.make ?trace ?params ~seed ~n:5 ~link:(V.lossy 0.02) () in
  let rng = V.rng w in
  for i = 0 to V.nprocs w - 1 do
    V.at w (Rng.int rng 500_000_000) (fun () -> V.start w i)
  done;
  V.workload w ~from:(s 2.) ~until:(s 12.) ~count:150;
  let crash = Rng.bool rng in
  if crash then V.at w (s 4. + Rng.int rng (s 4.)) (fun () -> V.crash w (Rng.int rng (V.nprocs w)));
  let attack_from = s 3. and attack_until = s 11. in
  let forger = ref None in
  let sent = ref 0 in
  V.at w (s 1.) (fun () ->
      match
        Sim.open_ (V.net w) "x0" (fun _ ->
            { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
      with
      | Ok c -> forger := Some c
      | Error e -> V.problem w (Fmt.str "forger: %a" Transport.pp_error e));
  let inject () =
    match !forger with
    | None -> ()
    | Some c -> (
        let i = Rng.int rng (V.nprocs w) in
        match V.member w i with
        | None -> ()
        | Some (_, st) -> (
            let view = Stack.view st in
            let stack = match V.group w i with Some g -> G.stack_id g | None -> "" in
            let n = View.nmembers view in
            if n > 1 then
              let target = view.View.rank in
              let origin = (target + 1 + Rng.int rng (n - 1)) mod n in
              let kind = kinds.(Rng.int rng (Array.length kinds)) in
              match forge rng kind ~layers:(Stack.layers st) ~view ~stack ~target ~origin with
              | None -> ()
              | Some bytes ->
                  let copies = if kind = Nak_forged then 1 + Rng.int rng 10 else 1 in
                  for _ = 1 to copies do
                    incr sent;
                    let msg = Msg.of_string Pool.default bytes in
                    ignore (Sim.send c ~dst:(V.addr w i) msg);
                    Msg.release msg
                  done))
  in
  for _ = 1 to 500 do
    V.at w (attack_from + Rng.int rng (attack_until - attack_from)) inject
  done;
  let t =
    {
      seen = Hashtbl.create 256;
      peak_mnak = 0;
      peak_pt2pt = 0;
      last_repair = 0;
      last_view = 0;
      views = 0;
    }
  in
  let horizon = s 30. in
  let step = Time.of_ms 250 in
  let rec tick at =
    if at <= horizon then
      V.at w at (fun () ->
          sample w t;
          tick (at + step))
  in
  tick step;
  Sim.run ~until:horizon (V.net w);
  let bound what v limit =
    if v > limit then
      V.problem w (Printf.sprintf "%s reached %d, over the bound of %d" what v limit)
  in
  bound "Mnak's buffered casts at one member" t.peak_mnak max_mnak_buffered;
  bound "Pt2pt's buffered and unacknowledged messages at one member" t.peak_pt2pt max_pt2pt_buffered;
  let quiet_by = max attack_until t.last_view + settle in
  if t.last_repair > quiet_by then
    V.problem w
      (Printf.sprintf
         "NAKs or statuses still sent at %s, %s after the attack and the last view change"
         (Fmt.str "%a" Time.pp t.last_repair)
         (Fmt.str "%a" Time.pp settle));
  let need what v =
    if v = 0 then V.problem w (Printf.sprintf "no forgery was counted as %s" what)
  in
  (* Sealed members (sim.props with Auth, Privacy or Rekey) drop the
     stranger's datagrams before any layer: the seal counts them. *)
  let seals =
    List.filter_map
      (fun i -> Option.map (fun g -> Sealed.stats (G.connection g)) (V.group w i))
      (List.init (V.nprocs w) Fun.id)
  in
  if !sent = 0 then V.problem w "no forgery was sent"
  else if List.exists (fun st -> st.Consort_seal.Seal.sealed > 0) seals then
    need "unsealed by the seal"
      (List.fold_left (fun a st -> a + st.Consort_seal.Seal.clear) 0 seals)
  else begin
    need "beyond the window" (total t [ "mnak.beyond_window"; "pt2pt.beyond_window" ]);
    need "impossible" (total t [ "mnak.impossible"; "pt2pt.impossible" ]);
    need "not for this group or member"
      (total t [ "bottom.wrong_group"; "bottom.from_self"; "bottom.bad_rank" ]);
    need "garbage" (garbage t);
    need "a NAK repeated too soon" (total t [ "mnak.naks_ignored" ])
  end;
  V.note w "forged %d datagrams; peak buffered mnak %d pt2pt %d; last repair at %d" !sent
    t.peak_mnak t.peak_pt2pt t.last_repair;
  V.finish w

(* {1 vsync-forged-side: forged side-channel messages}

   An unsealed group cannot stop forgeries of its side channel (discovery,
   merge requests, Installs and their acknowledgements, switch requests,
   leaves, probes), but none may cost it anything: the five members form
   one view, then a stranger sends them every kind, well-formed from what
   it sees of the group (bit-flipped copies of its discovery messages,
   requests naming made-up partitions, acknowledgements of views, switches
   to another stack, leaves, answers to probes never sent), and the group
   must go on in that view, delivering without a pause longer than
   [max_pause]. *)

module Side = Consort_group.Side
module Properties = Consort_group.Properties
module Stack_id = Consort_group.Stack_id

type side_kind =
  | Gossip_flipped  (** the coordinator's discovery message, its id made lesser *)
  | Gossip_made_up  (** a partition that does not exist, at a member's address or none *)
  | Merge_made_up  (** a merge request from members that do not exist *)
  | Merge_of_members  (** a merge request naming members of the view *)
  | Install_forged  (** a next view, or this view again *)
  | Install_ack_forged
  | Switch_forged  (** a switch to another stack, in this view *)
  | Leave_forged  (** an Install naming members as leaving *)
  | Probe_forged  (** probes and answers to probes never sent *)
  | Bit_flipped  (** any of these, one bit flipped *)

let side_kinds =
  [|
    Gossip_flipped;
    Gossip_made_up;
    Merge_made_up;
    Merge_of_members;
    Install_forged;
    Install_ack_forged;
    Switch_forged;
    Leave_forged;
    Probe_forged;
    Bit_flipped;
  |]

(* [s] with one character lowered (its lowest set bit cleared): an id that
   sorts before it. *)
let lesser rng s =
  if s = "" then "!"
  else
    let b = Bytes.of_string s in
    let i = Rng.int rng (Bytes.length b) in
    let c = Char.code (Bytes.get b i) in
    Bytes.set b i (Char.chr (c land (c - 1)));
    Bytes.to_string b

let flip_bit rng s =
  if s = "" then s
  else
    let b = Bytes.of_string s in
    let i = Rng.int rng (Bytes.length b) in
    Bytes.set b i (Char.chr (Char.code (Bytes.get b i) lxor (1 lsl Rng.int rng 8)));
    Bytes.to_string b

(* The members' stack ([f] the tunables), and another every member can
   build: the same with one tunable changed. *)
let stack_of w f =
  match
    Properties.of_string
      (String.map (function '+' -> ',' | c -> c) (Params.string (V.params w) "sim.props"))
  with
  | Ok p -> (
      match Properties.layers p with
      | Ok layers -> Stack_id.to_string (Stack_id.of_layers ~params:(f (V.params w)) layers)
      | Error _ -> "")
  | Error _ -> ""

let other_stack w = stack_of w (Params.set Consort_group.Mnak.Param.window (Params.Int 77))

let rec forge_side rng w kind ~(view : Consort_group.Group.view_info) ~stack ~addr_of =
  let group = "sim" in
  let members = view.members in
  let n = Array.length members in
  let any () = members.(Rng.int rng n) in
  let member eid = { Side.eid; addr = Option.value (addr_of eid) ~default:"x0"; pub = "" } in
  let coord = view.coordinator in
  let made_up () =
    {
      Side.eid = lesser rng (any ());
      addr =
        (match Rng.int rng 3 with
        | 0 -> Option.value (addr_of (any ())) ~default:"x0"
        | 1 -> "x0"
        | _ -> "p" ^ string_of_int (10 + Rng.int rng 5));
      pub = "";
    }
  in
  let vid () = if Rng.bool rng then view.vid else flip_bit rng view.vid in
  let st = { Side.epoch = 0; id = stack } in
  match kind with
  | Gossip_flipped ->
      let c = member coord in
      Side.Gossip
        {
          group;
          vid = (if Rng.bool rng then flip_bit rng view.vid else view.vid);
          ltime = view.ltime;
          coord = { c with eid = lesser rng c.eid };
          size = n;
          stack = st;
        }
  | Gossip_made_up ->
      Side.Gossip
        {
          group;
          vid = Printf.sprintf "%d:%s" (Rng.int rng 100) (lesser rng coord);
          ltime = Rng.int rng 100;
          coord = made_up ();
          size = 1 + Rng.int rng 5;
          stack = st;
        }
  | Merge_made_up ->
      Side.Merge_req
        {
          group;
          vid = Printf.sprintf "%d:%s" (Rng.int rng 100) (lesser rng coord);
          ltime = Rng.int rng 100;
          members = List.init (1 + Rng.int rng 3) (fun _ -> made_up ());
          stack = st;
          dst = coord;
        }
  | Merge_of_members ->
      Side.Merge_req
        {
          group;
          vid = vid ();
          ltime = view.ltime;
          members = [ member (any ()) ];
          stack = st;
          dst = (if Rng.bool rng then coord else any ());
        }
  | Install_forged ->
      let next = view.ltime + if Rng.bool rng then 0 else 1 + Rng.int rng 3 in
      Side.Install
        {
          group;
          vid = (if next = view.ltime then view.vid else Printf.sprintf "%d:%s" next (any ()));
          ltime = next;
          members = List.map member (Array.to_list members);
          leavers = [];
          preds = [ view.vid ];
          stack = st;
          keys = [];
        }
  | Install_ack_forged -> Side.Install_ack { group; vid = vid (); eid = any (); dst = coord }
  | Switch_forged ->
      Side.Switch_req
        {
          group;
          vid = view.vid;
          stack = { Side.epoch = 1 + Rng.int rng 3; id = other_stack w };
          dst = coord;
        }
  | Leave_forged ->
      let leaving = any () in
      Side.Install
        {
          group;
          vid = Printf.sprintf "%d:%s" (view.ltime + 1) coord;
          ltime = view.ltime + 1;
          members =
            List.filter_map
              (fun e -> if e = leaving then None else Some (member e))
              (Array.to_list members);
          leavers = [ leaving ];
          preds = [ view.vid ];
          stack = st;
          keys = [];
        }
  | Probe_forged ->
      let nonce = Printf.sprintf "%016Lx" (Rng.bits64 rng) in
      if Rng.bool rng then
        Side.Probe { group; vid = vid (); nonce; eid = lesser rng coord; dst = any () }
      else Side.Probe_ack { group; vid = vid (); nonce; eid = any (); dst = coord }
  | Bit_flipped ->
      forge_side rng w side_kinds.(Rng.int rng (Array.length side_kinds - 1)) ~view ~stack ~addr_of

let max_pause = Time.of_sec 1.

let side_scenario ?trace ?params seed =
  let s = Time.of_sec in
  let w = V.make ?trace ?params ~seed ~n:5 ~link:(V.lossy 0.01) () in
  let rng = V.rng w in
  for i = 0 to V.nprocs w - 1 do
    V.at w (Rng.int rng 500_000_000) (fun () -> V.start w i)
  done;
  let attack_from = s 4. and attack_until = s 12. in
  V.workload w ~from:(s 2.) ~until:(s 14.) ~count:400;
  (* Views installed once the group formed, and each member's deliveries. *)
  let late_views = ref [] in
  let last = Array.make (V.nprocs w) None and pause = ref 0 in
  V.set_hooks w
    {
      V.no_hooks with
      viewed =
        (fun i _ v ->
          if Sim.now (V.net w) >= attack_from then
            late_views := (Sim.now (V.net w), i, v.Consort_group.Group.vid) :: !late_views);
      applied =
        (fun i _ ~view:_ _ ~origin:_ _ ->
          let now = Sim.now (V.net w) in
          (match last.(i) with
          | Some t0 when now > attack_from && t0 < attack_until -> pause := max !pause (now - t0)
          | _ -> ());
          last.(i) <- Some now);
    };
  V.at w
    (attack_from - Time.of_ms 10)
    (fun () ->
      let vids =
        List.filter_map
          (fun i -> Option.map (fun g -> (G.view g).Consort_group.Group.vid) (V.group w i))
          (List.init (V.nprocs w) Fun.id)
      in
      match vids with
      | v :: rest when List.length vids = V.nprocs w && List.for_all (( = ) v) rest -> ()
      | _ -> V.problem w "the five members did not form one view before the forgeries");
  let forger = ref None in
  let sent = ref 0 and by_kind = Array.make (Array.length side_kinds) 0 in
  V.at w (s 1.) (fun () ->
      match
        Sim.open_ (V.net w) "x0" (fun _ ->
            { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
      with
      | Ok c -> forger := Some c
      | Error e -> V.problem w (Fmt.str "forger: %a" Transport.pp_error e));
  let addr_of eid = V.addr_of_member w eid in
  let inject () =
    match !forger with
    | None -> ()
    | Some c -> (
        let i = Rng.int rng (V.nprocs w) in
        match V.group w i with
        | None -> ()
        | Some g ->
            let view = G.view g in
            let k = Rng.int rng (Array.length side_kinds) in
            let stack = stack_of w Fun.id in
            if Stack_id.(Result.map digest (of_string stack)) <> Ok (G.stack_id g) then
              V.problem w "the forger does not know the members' stack";
            let m = forge_side rng w side_kinds.(k) ~view ~stack ~addr_of in
            let bytes = Codec.encode_string Side.codec m in
            let bytes = if side_kinds.(k) = Bit_flipped then flip_bit rng bytes else bytes in
            incr sent;
            by_kind.(k) <- by_kind.(k) + 1;
            let msg = Msg.of_string Pool.default bytes in
            ignore (Sim.send c ~dst:(V.addr w i) msg);
            Msg.release msg)
  in
  for _ = 1 to 2000 do
    V.at w (attack_from + Rng.int rng (attack_until - attack_from)) inject
  done;
  let horizon = s 20. in
  Sim.run ~until:horizon (V.net w);
  (match List.rev !late_views with
  | [] -> ()
  | (at, i, vid) :: _ ->
      V.problem w
        (Fmt.str "forgeries alone changed the view: %s installed view %s at %a (%d installs)"
           (V.addr w i) vid Time.pp at (List.length !late_views)));
  if !pause > max_pause then
    V.problem w
      (Fmt.str "a member delivered nothing for %a during the forgeries (bound %a)" Time.pp !pause
         Time.pp max_pause);
  let counted =
    List.fold_left
      (fun acc i ->
        match V.group w i with
        | Some g ->
            let c = Option.value (List.assoc_opt "group" (G.counters g)) ~default:[] in
            acc
            + Option.value (List.assoc_opt "side_garbage" c) ~default:0
            + Option.value (List.assoc_opt "side_misdirected" c) ~default:0
        | None -> acc)
      0
      (List.init (V.nprocs w) Fun.id)
  in
  if !sent = 0 then V.problem w "no forgery was sent"
  else if counted = 0 then V.problem w "no forgery was counted as side_garbage or side_misdirected";
  V.note w "forged %d side-channel datagrams (%s); %d counted; longest pause %s" !sent
    (String.concat " " (Array.to_list (Array.map string_of_int by_kind)))
    counted (Fmt.str "%a" Time.pp !pause);
  V.finish w

let scenarios =
  [
    ( "vsync-forged-side",
      "5 members, unsealed, under 1% loss, while a stranger forges every side-channel message \
       (discovery, merge requests, Installs, their acknowledgements, switch requests, leaves, \
       probes), whole or bit-flipped: no view changes and no member pauses its deliveries for over \
       1 s",
      side_scenario );
    ( "vsync-forged",
      "5 members cast and send under 2% loss (one may crash) while a stranger injects forged \
       datagrams: numbers beyond any window and max_int, negative varints, wrong group stamps and \
       origins, NAK storms, impossible statuses, truncated headers; buffers stay bounded and \
       repairs fall silent",
      scenario );
  ]

let names = List.map (fun (n, _, _) -> n) scenarios
let describe n = List.find_map (fun (n', d, _) -> if n = n' then Some d else None) scenarios

let run ?trace ?params name ~seed =
  match List.find_opt (fun (n, _, _) -> n = name) scenarios with
  | Some (_, _, f) -> Some (f ?trace ?params seed)
  | None -> None

let scenarios = Vsync_sim.scenarios_of ~names ~describe ~run
