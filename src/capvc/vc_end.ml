open Consort_cap
module P = Vc_proto

type trans =
  idempotent:bool -> Header.t -> string -> ((Header.t * string, Rpc_error.t) result -> unit) -> unit

type event = [ `Data of string | `Eof | `Intr | `Hangup of string ]

type t = {
  trans : trans;
  cap : Cap.t;
  mutable rd : int;
  mutable wr : int;
  mutable intr_seen : int;
  mutable intr_sent : int;
  mutable eof : bool;
  mutable intr_pending : bool;
  mutable hung : string option;
  mutable reading : bool;
  mutable writing : bool;
}

let create trans cap =
  {
    trans;
    cap;
    rd = 0;
    wr = 0;
    intr_seen = 0;
    intr_sent = 0;
    eof = false;
    intr_pending = false;
    hung = None;
    reading = false;
    writing = false;
  }

let local host ~now cap =
  create (fun ~idempotent:_ h d k -> Vc.handle host ~now:(now ()) h d (fun r -> k (Ok r))) cap

let hung t = t.hung
let written t = t.wr
let consumed t = t.rd

let hang t why =
  if t.hung = None then t.hung <- Some why;
  Option.get t.hung

(* The reason for a reply that is not [`Ok]. *)
let refusal t ((h : Header.t), d) =
  if Status.equal h.status P.hungup then
    hang t (if d = "" then "hung up" else String.sub d 0 (min 200 (String.length d)))
  else if Status.equal h.status `Notfound then hang t "the circuit is gone"
  else hang t (Status.to_string h.status)

let call t h d k =
  t.trans ~idempotent:true h d (function
    | Error e -> k (Error (hang t ("the circuit's host is unreachable: " ^ Rpc_error.to_string e)))
    | Ok ((rh : Header.t), _) as r when rh.status = `Ok -> k (Ok (Result.get_ok r))
    | Ok r -> k (Error (refusal t r)))

let read t ?(max = P.max_chunk) k =
  if t.reading then invalid_arg "Vc_end.read: a read is under way";
  let max = if max <= 0 || max > P.max_chunk then P.max_chunk else max in
  let finish ev =
    t.reading <- false;
    k ev
  in
  let rec go () =
    match t.hung with
    | Some why -> finish (`Hangup why)
    | None ->
        if t.intr_pending then begin
          t.intr_pending <- false;
          finish `Intr
        end
        else if t.eof then finish `Eof
        else
          call t (Header.request ~offset:t.rd ~size:max ~extra:t.intr_seen t.cap P.vc_read) ""
            (function
            | Error why -> finish (`Hangup why)
            | Ok ((h : Header.t), d) ->
                let n = String.length d in
                if h.offset <> t.rd || n > max || h.size < t.intr_seen then
                  finish (`Hangup (hang t "the host's reply makes no sense"))
                else begin
                  t.rd <- t.rd + n;
                  if h.extra land P.eof_flag <> 0 then t.eof <- true;
                  if h.size > t.intr_seen then begin
                    t.intr_seen <- h.size;
                    t.intr_pending <- true
                  end;
                  if n > 0 then finish (`Data d) else go ()
                end)
  in
  t.reading <- true;
  go ()

let write t s k =
  if t.writing then invalid_arg "Vc_end.write: a write is under way";
  let base = t.wr and len = String.length s in
  let finish r =
    t.writing <- false;
    k r
  in
  let rec go () =
    match t.hung with
    | Some why -> finish (Error why)
    | None ->
        let off = t.wr - base in
        if off >= len then finish (Ok ())
        else
          let n = min P.max_chunk (len - off) in
          call t (Header.request ~offset:t.wr t.cap P.vc_write) (String.sub s off n) (function
            | Error why -> finish (Error why)
            | Ok ((h : Header.t), _) ->
                if h.offset < t.wr || h.offset > t.wr + n then
                  finish (Error (hang t "the host's reply makes no sense"))
                else begin
                  t.wr <- h.offset;
                  go ()
                end)
  in
  t.writing <- true;
  go ()

let simple t h k =
  match t.hung with
  | Some why -> k (Error why)
  | None -> call t h "" (function Error why -> k (Error why) | Ok _ -> k (Ok ()))

let close t k = simple t (Header.request ~offset:t.wr t.cap P.vc_close) k

let intr t k =
  t.intr_sent <- t.intr_sent + 1;
  simple t (Header.request ~extra:t.intr_sent t.cap P.vc_intr) k

let hangup t k =
  match t.hung with
  | Some why -> k (Error why)
  | None ->
      call t (Header.request t.cap P.vc_hangup) "" (fun r ->
          ignore (hang t "hung up here");
          k (Result.map ignore r))

let touch t =
  if t.hung = None then
    t.trans ~idempotent:true (Std.touch_request t.cap) "" (function
      | Error e -> ignore (hang t ("the circuit's host is unreachable: " ^ Rpc_error.to_string e))
      | Ok ((h : Header.t), _) as r when h.status <> `Ok -> ignore (refusal t (Result.get_ok r))
      | Ok _ -> ())
