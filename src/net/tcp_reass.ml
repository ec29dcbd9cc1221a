(* Segments live in an ordered map keyed by their start, and the contiguous
   ranges they form (the SACK blocks) in a second map keyed by their end.
   Sequence numbers are unwrapped into plain integers around an anchor that
   follows the latest arrival: everything queued lies within one receive
   window of it, far less than 2^31 away, so the integer order is the
   sequence order. Every operation is a constant number of map operations
   (O(log n), n <= max_segments), plus one per segment it releases, which
   each segment pays once: no list is scanned or copied per segment. *)

module M = Map.Make (Int)

type seg = { seq : Tcp_seq.t; pkt : Packet.t; len : int }
type block = { mutable lo : int }

type t = {
  max_segments : int;
  mutable q : seg M.t;  (** by start, no overlap *)
  mutable blk : block M.t;  (** the contiguous ranges held, by end, never adjacent *)
  mutable nblocks : int;
  mutable anchor_seq : Tcp_seq.t;
  mutable anchor : int;  (** [anchor_seq] unwrapped *)
  mutable count : int;
  mutable bytes : int;
  mutable recent : Tcp_seq.t list;  (** starts of recent arrivals, newest first *)
  segs : (int, int) Hashtbl.t;  (** pool segments held: how many packets of each *)
  mutable pinned : int;
  mutable work : int;
}

let create ~max_segments =
  {
    max_segments;
    q = M.empty;
    blk = M.empty;
    nblocks = 0;
    anchor_seq = Tcp_seq.zero;
    anchor = 0;
    count = 0;
    bytes = 0;
    recent = [];
    segs = Hashtbl.create 8;
    pinned = 0;
    work = 0;
  }

let tick t = t.work <- t.work + 1
let pos t s = t.anchor + Tcp_seq.sub s t.anchor_seq
let seq_of t p = Tcp_seq.add t.anchor_seq (p - t.anchor)

let hold t p =
  let id = Packet.segment_id p in
  match Hashtbl.find_opt t.segs id with
  | Some n -> Hashtbl.replace t.segs id (n + 1)
  | None ->
      Hashtbl.replace t.segs id 1;
      t.pinned <- t.pinned + Packet.truesize p

let unhold t p =
  let id = Packet.segment_id p in
  match Hashtbl.find_opt t.segs id with
  | Some 1 ->
      Hashtbl.remove t.segs id;
      t.pinned <- t.pinned - Packet.truesize p
  | Some n -> Hashtbl.replace t.segs id (n - 1)
  | None -> ()

(* A packet leaves the queue: released, or handed to the caller. *)
let forget t p = unhold t p
let is_empty t = M.is_empty t.q
let segments t = t.count
let bytes t = t.bytes
let block_count t = t.nblocks
let work t = t.work

let remember t seq =
  let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r in
  t.recent <- take 8 (seq :: List.filter (fun s -> not (Tcp_seq.equal s seq)) t.recent)

(* The ranges held grow by [a, b): the blocks it overlaps or touches merge
   into one. *)
let rec union t a b =
  tick t;
  match M.find_first_opt (fun hi -> hi >= a) t.blk with
  | Some (hi, bl) when bl.lo <= b ->
      t.blk <- M.remove hi t.blk;
      t.nblocks <- t.nblocks - 1;
      union t (min a bl.lo) (max b hi)
  | _ ->
      t.blk <- M.add b { lo = a } t.blk;
      t.nblocks <- t.nblocks + 1

let drop_seg t k s =
  t.q <- M.remove k t.q;
  forget t s.pkt;
  t.count <- t.count - 1;
  t.bytes <- t.bytes - s.len

let insert t seq pkt =
  let len = Packet.length pkt in
  if len <= 0 then begin
    Packet.release pkt;
    `Duplicate
  end
  else begin
    if M.is_empty t.q then t.anchor <- 0 else t.anchor <- pos t seq;
    t.anchor_seq <- seq;
    let s0 = t.anchor in
    let e0 = s0 + len in
    tick t;
    let covered =
      match M.find_last_opt (fun k -> k <= s0) t.q with
      | Some (k, s) -> k + s.len >= e0
      | None -> false
    in
    if covered then begin
      Packet.release pkt;
      `Duplicate
    end
    else begin
      (* Drop the segments the new one covers (each is stored again as
         part of it), then trim it against its neighbours. *)
      let rec drop () =
        tick t;
        match M.find_first_opt (fun k -> k >= s0) t.q with
        | Some (k, s) when k + s.len <= e0 ->
            drop_seg t k s;
            Packet.release s.pkt;
            drop ()
        | _ -> ()
      in
      drop ();
      tick t;
      let s1 =
        match M.find_last_opt (fun k -> k < s0) t.q with
        | Some (k, s) when k + s.len > s0 ->
            ignore (Packet.pull pkt (k + s.len - s0) : (unit, _) result);
            k + s.len
        | _ -> s0
      in
      tick t;
      let e1 =
        match M.find_first_opt (fun k -> k >= s1) t.q with
        | Some (k, _) when k < e0 ->
            Packet.trim pkt (k - s1);
            k
        | _ -> e0
      in
      let len = e1 - s1 in
      if len <= 0 then begin
        Packet.release pkt;
        `Duplicate
      end
      else if t.count >= t.max_segments then begin
        Packet.release pkt;
        `Full
      end
      else begin
        (* Stored: whatever was dropped lies inside the new segment, so the
           ranges held are the old ones and [s0, e0). *)
        let seq = seq_of t s1 in
        t.q <- M.add s1 { seq; pkt; len } t.q;
        hold t pkt;
        t.count <- t.count + 1;
        t.bytes <- t.bytes + len;
        union t s1 e1;
        remember t seq;
        `Stored
      end
    end
  end

(* The first segment left: the first block now starts where it ended. *)
let shrink_first t lo =
  match M.min_binding_opt t.blk with
  | Some (hi, _) when lo >= hi ->
      t.blk <- M.remove hi t.blk;
      t.nblocks <- t.nblocks - 1
  | Some (_, bl) -> bl.lo <- lo
  | None -> ()

let rec pop t next =
  tick t;
  match M.min_binding_opt t.q with
  | None -> None
  | Some (k, s) ->
      let n = pos t next in
      if k > n then None
      else begin
        drop_seg t k s;
        shrink_first t (k + s.len);
        if k + s.len <= n then begin
          Packet.release s.pkt;
          pop t next
        end
        else begin
          ignore (Packet.pull s.pkt (n - k) : (unit, _) result);
          Some s.pkt
        end
      end

let blocks t = M.fold (fun hi bl acc -> (seq_of t bl.lo, seq_of t hi) :: acc) t.blk [] |> List.rev

let sack_blocks t ~max =
  let holding s =
    tick t;
    let p = pos t s in
    match M.find_first_opt (fun hi -> hi > p) t.blk with
    | Some (hi, bl) when bl.lo <= p -> Some (bl.lo, hi)
    | _ -> None
  in
  let chosen = ref [] and n = ref 0 in
  let add b =
    if not (List.mem b !chosen) then begin
      chosen := b :: !chosen;
      incr n
    end
  in
  List.iter (fun s -> match holding s with Some b -> add b | None -> ()) t.recent;
  (* Then the others from the highest: only as many as can still be
     reported are looked at. *)
  let rec from_top s =
    if !n < max then
      match s () with
      | Seq.Nil -> ()
      | Seq.Cons ((hi, bl), s) ->
          tick t;
          add (bl.lo, hi);
          from_top s
  in
  from_top (M.to_rev_seq t.blk);
  let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r in
  List.map (fun (l, r) -> (seq_of t l, seq_of t r)) (take max (List.rev !chosen))

let clear t =
  M.iter (fun _ s -> Packet.release s.pkt) t.q;
  Hashtbl.reset t.segs;
  t.pinned <- 0;
  t.q <- M.empty;
  t.blk <- M.empty;
  t.nblocks <- 0;
  t.count <- 0;
  t.bytes <- 0;
  t.recent <- []

let pinned t = t.pinned

(* Contiguous segments become one packet, copied into fresh memory from
   [pool]: the pool segments the old packets pinned are let go. The ranges
   held do not change. *)
let collapse t pool =
  let run_len run = List.fold_left (fun n (_, s) -> n + s.len) 0 run in
  let runs =
    M.fold
      (fun k s acc ->
        match acc with
        | ((k', r) :: _ as run) :: rest when k' + r.len = k && run_len run + s.len <= 65536 ->
            ((k, s) :: run) :: rest
        | _ -> [ (k, s) ] :: acc)
      t.q []
  in
  let copy run =
    let run = List.rev run in
    let k, first = List.hd run in
    let len = run_len run in
    let p = Packet.create ~headroom:0 pool len in
    let dst = Packet.cstruct p in
    ignore
      (List.fold_left
         (fun off (_, s) ->
           Cstruct.blit (Packet.cstruct s.pkt) 0 dst off s.len;
           forget t s.pkt;
           Packet.release s.pkt;
           off + s.len)
         0 run
        : int);
    hold t p;
    (k, { seq = first.seq; pkt = p; len })
  in
  let q =
    List.fold_left
      (fun m run ->
        let k, s = copy run in
        M.add k s m)
      M.empty runs
  in
  t.q <- q;
  t.count <- M.cardinal q
