type seg = { seq : Tcp_seq.t; pkt : Packet.t; len : int }

type t = {
  max_segments : int;
  mutable q : seg list;  (** ascending by [seq], no overlap *)
  mutable count : int;
  mutable bytes : int;
  mutable recent : Tcp_seq.t list;  (** starts of recent arrivals, newest first *)
  segs : (int, int) Hashtbl.t;  (** pool segments held: how many packets of each *)
  mutable pinned : int;
}

let create ~max_segments =
  { max_segments; q = []; count = 0; bytes = 0; recent = []; segs = Hashtbl.create 8; pinned = 0 }

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
let is_empty t = t.q = []
let segments t = t.count
let bytes t = t.bytes
let end_ s = Tcp_seq.add s.seq s.len

let remember t seq =
  let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r in
  t.recent <- take 8 (seq :: List.filter (fun s -> not (Tcp_seq.equal s seq)) t.recent)

let insert t seq pkt =
  let len = Packet.length pkt in
  let e = Tcp_seq.add seq len in
  let covers s = Tcp_seq.leq s.seq seq && Tcp_seq.geq (end_ s) e in
  if len <= 0 || List.exists covers t.q then begin
    Packet.release pkt;
    `Duplicate
  end
  else begin
    (* Drop the segments the new one covers, then trim it against its
       neighbours. *)
    let kept =
      List.filter
        (fun s ->
          if Tcp_seq.geq s.seq seq && Tcp_seq.leq (end_ s) e then begin
            forget t s.pkt;
            Packet.release s.pkt;
            t.count <- t.count - 1;
            t.bytes <- t.bytes - s.len;
            false
          end
          else true)
        t.q
    in
    t.q <- kept;
    let seq, len =
      match List.find_opt (fun s -> Tcp_seq.lt s.seq seq && Tcp_seq.gt (end_ s) seq) kept with
      | Some p ->
          let cut = Tcp_seq.sub (end_ p) seq in
          ignore (Packet.pull pkt cut : (unit, _) result);
          (Tcp_seq.add seq cut, len - cut)
      | None -> (seq, len)
    in
    let len =
      match List.find_opt (fun s -> Tcp_seq.geq s.seq seq && Tcp_seq.lt s.seq e) kept with
      | Some q ->
          let keep = Tcp_seq.sub q.seq seq in
          Packet.trim pkt keep;
          keep
      | None -> len
    in
    if len <= 0 then begin
      Packet.release pkt;
      `Duplicate
    end
    else if t.count >= t.max_segments then begin
      Packet.release pkt;
      `Full
    end
    else begin
      let s = { seq; pkt; len } in
      let rec ins = function
        | [] -> [ s ]
        | x :: r as l -> if Tcp_seq.lt seq x.seq then s :: l else x :: ins r
      in
      t.q <- ins t.q;
      hold t pkt;
      t.count <- t.count + 1;
      t.bytes <- t.bytes + len;
      remember t seq;
      `Stored
    end
  end

let rec pop t next =
  match t.q with
  | [] -> None
  | s :: rest ->
      if Tcp_seq.gt s.seq next then None
      else begin
        t.q <- rest;
        forget t s.pkt;
        t.count <- t.count - 1;
        t.bytes <- t.bytes - s.len;
        if Tcp_seq.leq (end_ s) next then begin
          Packet.release s.pkt;
          pop t next
        end
        else begin
          ignore (Packet.pull s.pkt (Tcp_seq.sub next s.seq) : (unit, _) result);
          Some s.pkt
        end
      end

let blocks t =
  let rec go acc = function
    | [] -> List.rev acc
    | s :: rest -> (
        match acc with
        | (l, r) :: acc' when Tcp_seq.equal r s.seq -> go ((l, end_ s) :: acc') rest
        | _ -> go ((s.seq, end_ s) :: acc) rest)
  in
  go [] t.q

let sack_blocks t ~max =
  let bs = blocks t in
  let holding s = List.find_opt (fun (l, r) -> Tcp_seq.between s ~low:l ~high:r) bs in
  let chosen = ref [] in
  let add b = if not (List.mem b !chosen) then chosen := b :: !chosen in
  List.iter (fun s -> match holding s with Some b -> add b | None -> ()) t.recent;
  List.iter add (List.rev bs);
  let rec take n = function [] -> [] | x :: r -> if n = 0 then [] else x :: take (n - 1) r in
  take max (List.rev !chosen)

let clear t =
  List.iter (fun s -> Packet.release s.pkt) t.q;
  Hashtbl.reset t.segs;
  t.pinned <- 0;
  t.q <- [];
  t.count <- 0;
  t.bytes <- 0;
  t.recent <- []

let pinned t = t.pinned

(* Contiguous segments become one packet, copied into fresh memory from
   [pool]: the pool segments the old packets pinned are let go. *)
let collapse t pool =
  let run_len run = List.fold_left (fun n s -> n + s.len) 0 run in
  let runs =
    List.fold_left
      (fun acc s ->
        match acc with
        | (r :: _ as run) :: rest when Tcp_seq.equal (end_ r) s.seq && run_len run + s.len <= 65536
          ->
            (s :: run) :: rest
        | _ -> [ s ] :: acc)
      [] t.q
  in
  let copy run =
    let run = List.rev run in
    let first = List.hd run in
    let len = run_len run in
    let p = Packet.create ~headroom:0 pool len in
    let dst = Packet.cstruct p in
    ignore
      (List.fold_left
         (fun off s ->
           Cstruct.blit (Packet.cstruct s.pkt) 0 dst off s.len;
           forget t s.pkt;
           Packet.release s.pkt;
           off + s.len)
         0 run
        : int);
    hold t p;
    { seq = first.seq; pkt = p; len }
  in
  let q = List.rev_map copy runs in
  t.q <- q;
  t.count <- List.length q
