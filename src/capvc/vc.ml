open Consort_cap
module P = Vc_proto

let src = Logs.Src.create "consort.capvc" ~doc:"Consort virtual circuits"

module Log = (val Logs.src_log src : Logs.LOG)

type config = {
  capacity : int;
  hold : Consort.Time.t;
  silence : Consort.Time.t;
  linger : Consort.Time.t;
  max_circuits : int;
}

let default_config =
  {
    capacity = 64 * 1024;
    hold = Consort.Time.of_sec 1.;
    silence = Consort.Time.of_sec 10.;
    linger = Consort.Time.of_sec 10.;
    max_circuits = 256;
  }

type reply = Header.t * string -> unit

(* One direction: a ring indexed by absolute stream position. *)
type dir = {
  ring : Bytes.t;
  mutable acked : int; (* bytes consumed by the reader *)
  mutable written : int; (* bytes accepted from the writer *)
  mutable closed : int option; (* the stream ends here *)
  mutable intr : int; (* interrupts sent into this direction *)
  mutable held_read : (Consort.Time.t * Header.t * reply) option;
  mutable held_write : (Consort.Time.t * Header.t * string * reply) option;
}

type circ = {
  num : int;
  secret : Cap.Secret.t;
  ab : dir; (* end A writes, end B reads *)
  ba : dir;
  heard : Consort.Time.t array; (* per end *)
  mutable hung : (string * Consort.Time.t) option;
}

type t = {
  config : config;
  port : Port.t;
  g : Mirage_crypto_rng.g option;
  table : (int, circ) Hashtbl.t;
  mutable next : int;
  std : Std.objects;
}

type circuit = { a : Cap.t; b : Cap.t }
type stats = { circuits : int; buffered : int; held : int }

let port t = t.port

let new_dir cap =
  {
    ring = Bytes.create cap;
    acked = 0;
    written = 0;
    closed = None;
    intr = 0;
    held_read = None;
    held_write = None;
  }

(* Objects: circuit n has ends 2n (A) and 2n+1 (B); object 0 is never used. *)
let circ_in table obj = if obj < 2 then None else Hashtbl.find_opt table (obj / 2)
let circ_of t obj = circ_in t.table obj
let side obj = obj land 1
let dirs c obj = if side obj = 0 then (c.ab, c.ba) else (c.ba, c.ab) (* (out, in) *)
let reply_status st = (Header.reply st, "")

let rec answer_held_read t c d ~now =
  match d.held_read with
  | None -> ()
  | Some (_, h, k) ->
      d.held_read <- None;
      do_read t c d ~now h k

and do_read t c d ~now (h : Header.t) k =
  match c.hung with
  | Some (why, _) -> k (Header.reply P.hungup, why)
  | None ->
      let o = h.offset in
      if o < d.acked || o > d.written || h.size <= 0 || h.size > P.max_chunk then
        k (reply_status `Argbad)
      else begin
        if o > d.acked then begin
          d.acked <- o;
          wake_write t c d ~now
        end;
        let avail = d.written - o in
        let eof_here n = match d.closed with Some e -> o + n = e | None -> false in
        if avail > 0 then begin
          let n = min avail h.size in
          let cap = Bytes.length d.ring in
          let s = Bytes.create n in
          let start = o mod cap in
          let first = min n (cap - start) in
          Bytes.blit d.ring start s 0 first;
          if first < n then Bytes.blit d.ring 0 s first (n - first);
          k
            ( Header.reply ~offset:o ~size:d.intr ~extra:(if eof_here n then P.eof_flag else 0) `Ok,
              Bytes.unsafe_to_string s )
        end
        else if eof_here 0 || d.intr > h.extra then
          k
            ( Header.reply ~offset:o ~size:d.intr ~extra:(if eof_here 0 then P.eof_flag else 0) `Ok,
              "" )
        else begin
          (* Nothing yet: hold it; a newer read replaces an older one. *)
          (match d.held_read with
          | Some (_, oh, ok) ->
              d.held_read <- None;
              ok (Header.reply ~offset:oh.offset ~size:d.intr `Ok, "")
          | None -> ());
          d.held_read <- Some (now, h, k)
        end
      end

and wake_write t c d ~now =
  match d.held_write with
  | None -> ()
  | Some (_, h, data, k) ->
      d.held_write <- None;
      do_write t c d ~now h data k

and do_write t c d ~now (h : Header.t) data k =
  match c.hung with
  | Some (why, _) -> k (Header.reply P.hungup, why)
  | None -> (
      let o = h.offset and l = String.length data in
      if o > d.written || l > P.max_chunk then k (reply_status `Argbad)
      else
        let skip = d.written - o in
        match d.closed with
        | Some e when o + l > e -> k (reply_status `Argbad)
        | _ ->
            if skip >= l then k (Header.reply ~offset:d.written `Ok, "")
            else
              let cap = Bytes.length d.ring in
              let room = cap - (d.written - d.acked) in
              let n = min room (l - skip) in
              if n = 0 then begin
                (match d.held_write with
                | Some (_, _, _, ok) ->
                    d.held_write <- None;
                    ok (Header.reply ~offset:d.written `Ok, "")
                | None -> ());
                d.held_write <- Some (now, h, data, k)
              end
              else begin
                let pos = ref d.written in
                for i = 0 to n - 1 do
                  Bytes.unsafe_set d.ring (!pos mod cap) (String.unsafe_get data (skip + i));
                  incr pos
                done;
                d.written <- d.written + n;
                k (Header.reply ~offset:d.written `Ok, "");
                answer_held_read t c d ~now
              end)

let do_hangup t c ~now why =
  ignore t;
  if c.hung = None then begin
    c.hung <- Some (why, now);
    List.iter
      (fun d ->
        (match d.held_read with
        | Some (_, _, k) ->
            d.held_read <- None;
            k (Header.reply P.hungup, why)
        | None -> ());
        match d.held_write with
        | Some (_, _, _, k) ->
            d.held_write <- None;
            k (Header.reply P.hungup, why)
        | None -> ())
      [ c.ab; c.ba ]
  end

let objects_of table =
  {
    Std.secret = (fun obj -> Option.map (fun c -> c.secret) (circ_in table obj));
    info =
      (fun obj ->
        match circ_in table obj with
        | None -> "-"
        | Some c ->
            Printf.sprintf "virtual circuit %d end %c%s" c.num
              (if side obj = 0 then 'A' else 'B')
              (match c.hung with Some (w, _) -> ", hung up: " ^ w | None -> ""));
    destroy = (fun _ -> `Ok);
    touch = (fun _ -> ());
    age = (fun () -> ());
    status = (fun () -> "");
  }

let create_host ?(config = default_config) ?g port =
  let table = Hashtbl.create 16 in
  { config; port; g; table; next = 1; std = objects_of table }

let create t ~now =
  if Hashtbl.length t.table >= t.config.max_circuits then Error `Full
  else begin
    let rec fresh n =
      if Hashtbl.mem t.table n || (2 * n) + 1 > Cap.max_object then
        fresh (if (2 * n) + 1 > Cap.max_object then 1 else n + 1)
      else n
    in
    let num = fresh t.next in
    t.next <- num + 1;
    let secret = Cap.Secret.generate ?g:t.g () in
    let c =
      {
        num;
        secret;
        ab = new_dir t.config.capacity;
        ba = new_dir t.config.capacity;
        heard = [| now; now |];
        hung = None;
      }
    in
    Hashtbl.replace t.table num c;
    Ok
      {
        a = Cap.owner t.port ~obj:(2 * num) secret;
        b = Cap.owner t.port ~obj:((2 * num) + 1) secret;
      }
  end

let hangup t ~now cap why =
  match circ_of t cap.Cap.obj with
  | Some c when Port.equal cap.Cap.port t.port -> do_hangup t c ~now why
  | _ -> ()

let handle_exn t ~now (h : Header.t) data k =
  let cmd = h.command in
  let on_end need f =
    match Std.validate t.port t.std ~need h with
    | Error st -> k (reply_status st)
    | Ok obj -> (
        match circ_of t obj with
        | None -> k (reply_status `Notfound)
        | Some c ->
            c.heard.(side obj) <- now;
            f c obj)
  in
  if cmd = P.vc_write then
    on_end Rights.modify (fun c obj -> do_write t c (fst (dirs c obj)) ~now h data k)
  else if cmd = P.vc_read then
    on_end Rights.read (fun c obj -> do_read t c (snd (dirs c obj)) ~now h k)
  else if cmd = P.vc_close then
    on_end Rights.modify (fun c obj ->
        let d = fst (dirs c obj) in
        match (c.hung, d.closed) with
        | Some (why, _), _ -> k (Header.reply P.hungup, why)
        | None, Some e -> if e = h.offset then k (reply_status `Ok) else k (reply_status `Argbad)
        | None, None ->
            if h.offset <> d.written then k (reply_status `Argbad)
            else begin
              d.closed <- Some h.offset;
              k (reply_status `Ok);
              answer_held_read t c d ~now
            end)
  else if cmd = P.vc_intr then
    on_end Rights.modify (fun c obj ->
        let d = fst (dirs c obj) in
        match c.hung with
        | Some (why, _) -> k (Header.reply P.hungup, why)
        | None ->
            if h.extra > d.intr then begin
              d.intr <- h.extra;
              k (reply_status `Ok);
              answer_held_read t c d ~now
            end
            else k (reply_status `Ok))
  else if cmd = P.vc_hangup then
    on_end Rights.modify (fun c obj ->
        do_hangup t c ~now (Printf.sprintf "end %c hung up" (if side obj = 0 then 'A' else 'B'));
        k (reply_status `Ok))
  else if cmd = Std.std_destroy then
    on_end Rights.destroy (fun c obj ->
        do_hangup t c ~now (Printf.sprintf "end %c destroyed" (if side obj = 0 then 'A' else 'B'));
        k (reply_status `Ok))
  else if cmd = Std.std_touch then on_end Rights.none (fun _ _ -> k (reply_status `Ok))
  else match Std.handle t.port t.std h data with Some r -> k r | None -> k (reply_status `Combad)

let handle t ~now h data k =
  let answered = ref false in
  let k r =
    if not !answered then begin
      answered := true;
      k r
    end
  in
  try handle_exn t ~now h data k
  with e ->
    Log.err (fun m -> m "%s: %s" (P.command_name h.Header.command) (Printexc.to_string e));
    k (reply_status `Syserr)

let tick t ~now =
  let expired since = Consort.Time.diff now since >= t.config.hold in
  let gone = ref [] in
  Hashtbl.iter
    (fun n c ->
      match c.hung with
      | Some (_, at) -> if Consort.Time.diff now at >= t.config.linger then gone := n :: !gone
      | None ->
          if Array.exists (fun at -> Consort.Time.diff now at >= t.config.silence) c.heard then
            do_hangup t c ~now
              (Printf.sprintf "end %c fell silent"
                 (if Consort.Time.diff now c.heard.(0) >= t.config.silence then 'A' else 'B'))
          else
            List.iter
              (fun d ->
                (match d.held_read with
                | Some (at, h, k) when expired at ->
                    d.held_read <- None;
                    k (Header.reply ~offset:h.Header.offset ~size:d.intr `Ok, "")
                | _ -> ());
                match d.held_write with
                | Some (at, _, _, k) when expired at ->
                    d.held_write <- None;
                    k (Header.reply ~offset:d.written `Ok, "")
                | _ -> ())
              [ c.ab; c.ba ])
    t.table;
  List.iter (Hashtbl.remove t.table) !gone

let stats t =
  Hashtbl.fold
    (fun _ c (s : stats) ->
      let held d = (if d.held_read <> None then 1 else 0) + if d.held_write <> None then 1 else 0 in
      {
        circuits = s.circuits + 1;
        buffered = s.buffered + (c.ab.written - c.ab.acked) + (c.ba.written - c.ba.acked);
        held = s.held + held c.ab + held c.ba;
      })
    t.table
    { circuits = 0; buffered = 0; held = 0 }
