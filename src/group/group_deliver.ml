(* A message's body handed to the application as a view of the received
   buffer, instead of a string (Group.join ~on_bytes). *)

open Consort

(* The piece of a message body being delivered as a view (the library is
   single-threaded; nothing here is live across a callback). *)
type piece = { mutable n : int; mutable buf : Cstruct.buffer; mutable off : int; mutable len : int }

let no_buffer = Bigarray.(Array1.create char c_layout 0)
let piece = { n = 0; buf = no_buffer; off = 0; len = 0 }

let note_piece b o l =
  piece.n <- piece.n + 1;
  piece.buf <- b;
  piece.off <- o;
  piece.len <- l

(* [f] is given its three arguments at once: applied to two first, as
   a closure to pass, it allocated about 11 words per message. *)
let bytes ~pool ~(counts : Group_counters.t) msg f kind ~origin =
  (* One piece: a view of the received datagram. A message
     reassembled from fragments is in pieces: one copy. *)
  piece.n <- 0;
  Msg.iter_body note_piece msg;
  if piece.n = 1 then f kind ~origin (Cstruct.of_bigarray ~off:piece.off ~len:piece.len piece.buf)
  else if piece.n = 0 then f kind ~origin Cstruct.empty
  else begin
    let body = Msg.body msg in
    let v = Iovecs.flatten pool body in
    Iovecs.release body;
    counts.copies <- counts.copies + 1;
    counts.copied_bytes <- counts.copied_bytes + Iovec.length v;
    Fun.protect ~finally:(fun () -> Iovec.release v) (fun () -> f kind ~origin (Iovec.cstruct v))
  end;
  piece.buf <- no_buffer;
  Msg.release msg

let string ~(counts : Group_counters.t) ~(cb : Group_types.callbacks) ~xfer ~is_current cell
    (src : Event.src) msg =
  let s = Msg.body_string msg in
  Msg.release msg;
  counts.copies <- counts.copies + 1;
  counts.copied_bytes <- counts.copied_bytes + String.length s;
  match cell with
  | Some c when not (is_current c) -> ()
  | Some c -> (
      (match src with
      | Event.Cast_from _ | Event.Send_from _ -> counts.delivered <- counts.delivered + 1
      | Event.Raw -> ());
      let origin r = (Group_view.members c).(r) in
      match (src, xfer) with
      | Event.Cast_from r, None -> cb.cast ~origin:(origin r) s
      | Event.Send_from r, None -> cb.send ~origin:(origin r) s
      | Event.Cast_from r, Some x -> Xfer.on_app x ~vid:(Group_view.id c) `Cast ~origin:(origin r) s
      | Event.Send_from r, Some x -> Xfer.on_app x ~vid:(Group_view.id c) `Send ~origin:(origin r) s
      | Event.Raw, _ -> ())
  | None -> ()
