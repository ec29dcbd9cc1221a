module type S = sig
  type key
  type 'a t

  val create : ?idle:Time.t -> ?now:(unit -> Time.t) -> ?on_evict:(key -> 'a -> unit) -> int -> 'a t
  val find : 'a t -> key -> 'a option
  val peek : 'a t -> key -> 'a option
  val mem : 'a t -> key -> bool
  val add : 'a t -> key -> 'a -> unit
  val oldest : 'a t -> (key * 'a) option
  val remove : 'a t -> key -> unit
  val length : 'a t -> int
  val capacity : 'a t -> int
  val evicted : 'a t -> int
  val expire : 'a t -> unit
  val iter : (key -> 'a -> unit) -> 'a t -> unit
  val fold : (key -> 'a -> 'b -> 'b) -> 'a t -> 'b -> 'b
  val clear : 'a t -> unit
end

module Make (K : Hashtbl.HashedType) = struct
  module H = Hashtbl.Make (K)

  type key = K.t

  type 'a node = {
    key : key;
    mutable value : 'a;
    mutable used : Time.t;
    mutable newer : 'a node option; (* towards the most recently used *)
    mutable older : 'a node option;
  }

  type 'a t = {
    tbl : 'a node H.t;
    cap : int;
    idle : Time.t option;
    now : unit -> Time.t;
    on_evict : key -> 'a -> unit;
    mutable newest : 'a node option;
    mutable oldest : 'a node option;
    mutable evicted : int;
  }

  let zero () = 0

  let create ?idle ?(now = zero) ?(on_evict = fun _ _ -> ()) cap =
    if cap < 1 then invalid_arg "Lru.create: capacity < 1";
    {
      tbl = H.create (min cap 1024);
      cap;
      idle;
      now;
      on_evict;
      newest = None;
      oldest = None;
      evicted = 0;
    }

  let unlink t n =
    (match n.newer with Some m -> m.older <- n.older | None -> t.newest <- n.older);
    (match n.older with Some m -> m.newer <- n.newer | None -> t.oldest <- n.newer);
    n.newer <- None;
    n.older <- None

  let push_newest t n =
    n.older <- t.newest;
    n.newer <- None;
    (match t.newest with Some m -> m.newer <- Some n | None -> t.oldest <- Some n);
    t.newest <- Some n

  let drop t n =
    unlink t n;
    H.remove t.tbl n.key;
    t.evicted <- t.evicted + 1;
    t.on_evict n.key n.value

  let expire t =
    match t.idle with
    | None -> ()
    | Some idle ->
        let limit = t.now () - idle in
        let rec go () =
          match t.oldest with
          | Some n when n.used <= limit ->
              drop t n;
              go ()
          | _ -> ()
        in
        go ()

  let touch t n =
    n.used <- t.now ();
    match t.newest with
    | Some m when m == n -> ()
    | _ ->
        unlink t n;
        push_newest t n

  let find t k =
    match H.find_opt t.tbl k with
    | None -> None
    | Some n ->
        touch t n;
        Some n.value

  let peek t k = match H.find_opt t.tbl k with None -> None | Some n -> Some n.value
  let mem t k = H.mem t.tbl k

  let add t k v =
    match H.find_opt t.tbl k with
    | Some n ->
        n.value <- v;
        touch t n
    | None ->
        expire t;
        (if H.length t.tbl >= t.cap then match t.oldest with Some n -> drop t n | None -> ());
        let n = { key = k; value = v; used = t.now (); newer = None; older = None } in
        H.replace t.tbl k n;
        push_newest t n

  let oldest t = match t.oldest with Some n -> Some (n.key, n.value) | None -> None

  let remove t k =
    match H.find_opt t.tbl k with
    | None -> ()
    | Some n ->
        unlink t n;
        H.remove t.tbl k

  let length t = H.length t.tbl
  let capacity t = t.cap
  let evicted t = t.evicted

  let fold f t acc =
    let rec go acc = function None -> acc | Some n -> go (f n.key n.value acc) n.older in
    go acc t.newest

  let iter f t = fold (fun k v () -> f k v) t ()

  let clear t =
    H.reset t.tbl;
    t.newest <- None;
    t.oldest <- None
end

include Make (struct
  type t = int

  let equal = Int.equal
  let hash (k : int) = Hashtbl.hash k
end)
