open Consort

let src = Logs.Src.create "consort.bundle" ~doc:"Bundling of datagrams per destination"

module Log = (val Logs.src_log src : Logs.LOG)

module Wire = struct
  let magic = 0xC4
  let format = 1
  let header = 4
  let per_datagram = 2
  let max_count = 0xffff
  let max_datagram = 0xffff

  let check cs =
    let len = Cstruct.length cs in
    if len < header then Error (Printf.sprintf "%d bytes, shorter than a bundle's header" len)
    else if Cstruct.get_uint8 cs 0 <> magic then Error "not a bundle"
    else if Cstruct.get_uint8 cs 1 <> format then
      Error (Printf.sprintf "format %d" (Cstruct.get_uint8 cs 1))
    else
      let count = Cstruct.BE.get_uint16 cs 2 in
      if count = 0 then Error "no datagram"
      else
        (* Each datagram takes at least 3 bytes: the walk is bounded by the
           datagram's own length whatever the count says. *)
        let rec walk i pos =
          if i = count then
            if pos = len then Ok count
            else Error (Printf.sprintf "%d bytes after the last datagram" (len - pos))
          else if pos + per_datagram > len then
            Error (Printf.sprintf "datagram %d of %d: length cut" (i + 1) count)
          else
            let l = Cstruct.BE.get_uint16 cs pos in
            let start = pos + per_datagram in
            if l = 0 then Error (Printf.sprintf "datagram %d of %d: empty" (i + 1) count)
            else if start + l > len then
              Error
                (Printf.sprintf "datagram %d of %d: %d bytes, past the end by %d" (i + 1) count l
                   (start + l - len))
            else walk (i + 1) (start + l)
        in
        walk 0 header

  let iter cs f =
    let count = Cstruct.BE.get_uint16 cs 2 in
    let pos = ref header in
    for _ = 1 to count do
      let l = Cstruct.BE.get_uint16 cs !pos in
      f (!pos + per_datagram) l;
      pos := !pos + per_datagram + l
    done

  let encode ds =
    let n = List.length ds in
    if n > max_count then invalid_arg "Bundle.Wire.encode: too many datagrams";
    let size = List.fold_left (fun acc d -> acc + per_datagram + String.length d) header ds in
    let b = Bytes.create size in
    Bytes.set_uint8 b 0 magic;
    Bytes.set_uint8 b 1 format;
    Bytes.set_uint16_be b 2 n;
    let pos = ref header in
    List.iter
      (fun d ->
        let l = String.length d in
        if l = 0 || l > max_datagram then invalid_arg "Bundle.Wire.encode: datagram length";
        Bytes.set_uint16_be b !pos l;
        Bytes.blit_string d 0 b (!pos + per_datagram) l;
        pos := !pos + per_datagram + l)
      ds;
    Bytes.unsafe_to_string b

  let decode s =
    let cs = Cstruct.of_string s in
    match check cs with
    | Error e -> Error e
    | Ok _ ->
        let acc = ref [] in
        iter cs (fun off len -> acc := Cstruct.to_string ~off ~len cs :: !acc);
        Ok (List.rev !acc)
end

module Param = struct
  let size = "group.bundle"

  let () =
    Params.register size (Params.Int 60_000) ~min:(Params.Int 0) ~max:(Params.Int 65_507)
      ~doc:
        "largest bundle in bytes: datagrams for one destination made in one step of the engine go \
         out together (0: no bundling)"
end

type stats = {
  bundles_sent : int;
  bundled : int;
  alone : int;
  bundles_received : int;
  unbundled : int;
  malformed : int;
}

let pp_stats ppf s =
  Fmt.pf ppf "bundles_sent=%d bundled=%d alone=%d bundles_received=%d unbundled=%d malformed=%d"
    s.bundles_sent s.bundled s.alone s.bundles_received s.unbundled s.malformed

let counters s =
  [
    ("bundles_sent", s.bundles_sent);
    ("bundled", s.bundled);
    ("bundles_received", s.bundles_received);
    ("unbundled", s.unbundled);
    ("malformed", s.malformed);
  ]

module Make (T : Transport.S) = struct
  type t = T.t
  type address = T.address

  let pp_address = T.pp_address
  let equal_address = T.equal_address
  let address_to_string = T.address_to_string
  let address_of_string = T.address_of_string

  type handler = T.handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }

  type nonrec control = T.control =
    | Drop_filter of (src:address -> Cstruct.t -> bool) option
    | Join_multicast of address

  type info = T.info = {
    local : address;
    mtu : int;
    multicast : bool;
    sent : int;
    received : int;
    dropped : int;
  }

  type timer = T.timer

  let now = T.now
  let at = T.at
  let cancel = T.cancel

  (* What waits for one destination (a send queue) or for the members a
     cast goes to (the cast queue): one datagram as it was given, or a
     bundle being filled. *)
  type queue = {
    mutable dst : address option; (* a send queue's destination *)
    mutable dsts : address list; (* the cast queue's destinations *)
    mutable lone : Msg.t option;
    mutable buf : Iovec.t option; (* a bundle: header, then datagrams *)
    mutable fill : int;
    mutable count : int;
    mutable waiting : bool; (* listed in [ready] *)
  }

  type connection = {
    tr : T.t;
    c : T.connection;
    pool : Pool.t;
    limit : int; (* 0: no bundling *)
    cast_q : queue;
    mutable sends : queue array; (* send queues, [nsends] in use *)
    mutable nsends : int;
    mutable ready : queue list; (* queues holding something, latest first *)
    mutable timer : T.timer option;
    mutable flush_cb : unit -> unit;
    mutable h : handler;
    mutable closed : bool;
    mutable bundles_sent : int;
    mutable bundled : int;
    mutable alone : int;
    mutable bundles_received : int;
    mutable unbundled : int;
    mutable malformed : int;
  }

  (* Send queues kept at most: beyond, every queue is flushed and the
     table starts again (the side channel may talk to many addresses). *)
  let max_queues = 64

  let new_queue () =
    { dst = None; dsts = []; lone = None; buf = None; fill = 0; count = 0; waiting = false }

  let inner c = c.c

  let stats c =
    {
      bundles_sent = c.bundles_sent;
      bundled = c.bundled;
      alone = c.alone;
      bundles_received = c.bundles_received;
      unbundled = c.unbundled;
      malformed = c.malformed;
    }

  let report = function
    | Ok () | Error `Closed -> ()
    | Error e -> Log.warn (fun m -> m "send failed: %a" Transport.pp_error e)

  let out c q msg =
    match q.dst with Some dst -> T.send c.c ~dst msg | None -> T.cast c.c ~dsts:q.dsts msg

  (* Sends what [q] holds, in order. *)
  let flush_queue c q =
    (match q.lone with
    | Some m ->
        q.lone <- None;
        c.alone <- c.alone + 1;
        report (out c q m);
        Msg.release m
    | None -> ());
    match q.buf with
    | Some v ->
        q.buf <- None;
        let cs = Iovec.cstruct v in
        Cstruct.BE.set_uint16 cs 2 q.count;
        c.bundles_sent <- c.bundles_sent + 1;
        c.bundled <- c.bundled + q.count;
        let m = Msg.of_iovec (Iovec.sub v ~off:0 ~len:q.fill) in
        Iovec.release v;
        q.fill <- 0;
        q.count <- 0;
        report (out c q m);
        Msg.release m
    | None -> ()

  let flush c =
    (match c.timer with
    | Some tm ->
        c.timer <- None;
        T.cancel tm
    | None -> ());
    match c.ready with
    | [] -> ()
    | [ q ] ->
        (* The common case, without a list or a closure. *)
        c.ready <- [];
        q.waiting <- false;
        flush_queue c q
    | ready ->
        c.ready <- [];
        List.iter
          (fun q ->
            q.waiting <- false;
            flush_queue c q)
          (List.rev ready)

  let discard c =
    let drop q =
      (match q.lone with Some m -> Msg.release m | None -> ());
      (match q.buf with Some v -> Iovec.release v | None -> ());
      q.lone <- None;
      q.buf <- None;
      q.waiting <- false
    in
    List.iter drop c.ready;
    c.ready <- [];
    (match c.timer with Some tm -> T.cancel tm | None -> ());
    c.timer <- None

  let mark c q =
    if not q.waiting then begin
      q.waiting <- true;
      c.ready <- q :: c.ready
    end;
    match c.timer with None -> c.timer <- Some (T.at c.tr (T.now c.tr) c.flush_cb) | Some _ -> ()

  let append q msg =
    let v = Option.get q.buf in
    let cs = Iovec.cstruct v in
    let len = Msg.length msg in
    Cstruct.BE.set_uint16 cs q.fill len;
    ignore (Msg.blit_to msg cs (q.fill + Wire.per_datagram));
    q.fill <- q.fill + Wire.per_datagram + len;
    q.count <- q.count + 1

  let start_bundle c q =
    let v = Pool.alloc c.pool c.limit in
    let cs = Iovec.cstruct v in
    Cstruct.set_uint8 cs 0 Wire.magic;
    Cstruct.set_uint8 cs 1 Wire.format;
    q.buf <- Some v;
    q.fill <- Wire.header;
    q.count <- 0

  (* The first byte of [msg], or -1 if it is empty. *)
  let first_byte = Msg.first_byte

  (* [direct c q msg] sends [msg] at once, in a bundle of one if it would
     read as a bundle. *)
  let direct c q msg =
    let len = Msg.length msg in
    if
      len > 0
      && first_byte msg = Wire.magic
      && len + Wire.header + Wire.per_datagram <= Wire.max_datagram
    then begin
      let v = Pool.alloc c.pool (len + Wire.header + Wire.per_datagram) in
      let cs = Iovec.cstruct v in
      Cstruct.set_uint8 cs 0 Wire.magic;
      Cstruct.set_uint8 cs 1 Wire.format;
      Cstruct.BE.set_uint16 cs 2 1;
      Cstruct.BE.set_uint16 cs Wire.header len;
      ignore (Msg.blit_to msg cs (Wire.header + Wire.per_datagram));
      let m = Msg.of_iovec v in
      let r = out c q m in
      Msg.release m;
      r
    end
    else out c q msg

  (* [hold c q msg]: [msg] starts what the empty [q] holds: as it is, or
     in a bundle if alone it would read as one. *)
  let hold c q msg =
    if first_byte msg = Wire.magic then begin
      start_bundle c q;
      append q msg
    end
    else q.lone <- Some (Msg.retain msg)

  (* [enqueue c q msg]: [msg] (not owned) joins what [q] holds. *)
  let enqueue c q msg =
    let len = Msg.length msg in
    if len = 0 || len + Wire.header + Wire.per_datagram > c.limit then begin
      (* Too large to share a bundle (or empty): after what the queue holds. *)
      flush_queue c q;
      direct c q msg
    end
    else begin
      (match (q.lone, q.buf) with
      | None, None -> hold c q msg
      | Some m, None ->
          if Msg.length m + len + Wire.header + (2 * Wire.per_datagram) > c.limit then begin
            flush_queue c q;
            hold c q msg
          end
          else begin
            q.lone <- None;
            start_bundle c q;
            append q m;
            Msg.release m;
            append q msg
          end
      | _, Some _ ->
          if q.fill + Wire.per_datagram + len > c.limit || q.count >= Wire.max_count then begin
            flush_queue c q;
            hold c q msg
          end
          else append q msg);
      mark c q;
      Ok ()
    end

  let send_queue c dst =
    let rec find i =
      if i >= c.nsends then None
      else
        match c.sends.(i).dst with
        | Some d when T.equal_address d dst -> Some c.sends.(i)
        | _ -> find (i + 1)
    in
    match find 0 with
    | Some q -> q
    | None ->
        if c.nsends >= max_queues then begin
          flush c;
          c.nsends <- 0
        end;
        if c.nsends = Array.length c.sends then begin
          let a = Array.init (max 4 (2 * c.nsends)) (fun _ -> new_queue ()) in
          Array.blit c.sends 0 a 0 c.nsends;
          c.sends <- a
        end;
        let q = c.sends.(c.nsends) in
        c.nsends <- c.nsends + 1;
        q.dst <- Some dst;
        q

  let send c ~dst msg =
    if c.closed then Error `Closed
    else if c.limit = 0 then direct c { (new_queue ()) with dst = Some dst } msg
    else enqueue c (send_queue c dst) msg

  let send_alone c ~dst msg =
    if c.closed then Error `Closed else direct c { (new_queue ()) with dst = Some dst } msg

  let cast c ~dsts msg =
    if c.closed then Error `Closed
    else if c.limit = 0 then direct c { (new_queue ()) with dsts } msg
    else begin
      let q = c.cast_q in
      if not (q.dsts == dsts || List.equal T.equal_address q.dsts dsts) then begin
        (* Other destinations (a new view): what was held goes first. *)
        flush_queue c q;
        q.dsts <- dsts
      end;
      enqueue c q msg
    end

  let on_recv c ~src v =
    let cs = Iovec.cstruct v in
    if Cstruct.length cs > 0 && Cstruct.get_uint8 cs 0 = Wire.magic then begin
      (match Wire.check cs with
      | Error e ->
          c.malformed <- c.malformed + 1;
          Log.debug (fun m -> m "malformed bundle from %a: %s" T.pp_address src e)
      | Ok n ->
          c.bundles_received <- c.bundles_received + 1;
          c.unbundled <- c.unbundled + n;
          Wire.iter cs (fun off len ->
              if not c.closed then
                let d = Iovec.sub v ~off ~len in
                try c.h.recv ~src d
                with e -> Log.err (fun m -> m "receive handler raised %s" (Printexc.to_string e))));
      Iovec.release v
    end
    else c.h.recv ~src v

  let no_handler = { recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }

  let open_with ?(size = 60_000) ?(pool = Pool.default) tr addr f =
    let self = ref None in
    let handler tc =
      let limit =
        if size <= Wire.header + (2 * (Wire.per_datagram + 1)) then 0 else min size (T.query tc).mtu
      in
      let c =
        {
          tr;
          c = tc;
          pool;
          limit;
          cast_q = new_queue ();
          sends = [||];
          nsends = 0;
          ready = [];
          timer = None;
          flush_cb = ignore;
          h = no_handler;
          closed = false;
          bundles_sent = 0;
          bundled = 0;
          alone = 0;
          bundles_received = 0;
          unbundled = 0;
          malformed = 0;
        }
      in
      c.flush_cb <-
        (fun () ->
          c.timer <- None;
          if not c.closed then flush c);
      self := Some c;
      c.h <- f c;
      {
        T.recv = (fun ~src v -> on_recv c ~src v);
        closed =
          (fun () ->
            if not c.closed then begin
              c.closed <- true;
              discard c;
              c.h.closed ()
            end);
      }
    in
    match T.open_ tr addr handler with
    | Error e -> Error e
    | Ok _ -> (
        match !self with
        | Some c -> Ok c
        | None -> Error (`System "bundle: the transport did not call the handler"))

  let open_ tr addr f = open_with tr addr f

  let close c =
    if not c.closed then begin
      flush c;
      T.close c.c;
      (* [T.close] calls [closed] above, which tells the handler. *)
      if not c.closed then begin
        c.closed <- true;
        discard c;
        c.h.closed ()
      end
    end

  let control c = T.control c.c
  let query c = T.query c.c
end
