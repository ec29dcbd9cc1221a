type kind = Cast | Send of int

type event =
  | Sent of { sender : int; kind : kind; seq : int }
  | Delivered of { receiver : int; sender : int; cast : bool; seq : int }
  | Crashed of int

type violation =
  | Bad_endpoint of { index : int; endpoint : int }
  | Resent of { index : int; sender : int; seq : int; first : int }
  | Not_sent of { index : int; receiver : int; sender : int; seq : int }
  | Wrong_kind of { index : int; receiver : int; sender : int; seq : int; sent : kind }
  | Misaddressed of { index : int; receiver : int; sender : int; seq : int; dst : int }
  | Duplicate of { index : int; receiver : int; sender : int; seq : int; first : int }
  | Out_of_order of { index : int; receiver : int; sender : int; seq : int; after : int }
  | Missing of { receiver : int; sender : int; seq : int }

let pp_kind ppf = function Cast -> Fmt.string ppf "cast" | Send d -> Fmt.pf ppf "send to %d" d

let pp_event ppf = function
  | Sent { sender; kind; seq } -> Fmt.pf ppf "%d sent #%d (%a)" sender seq pp_kind kind
  | Delivered { receiver; sender; cast; seq } ->
      Fmt.pf ppf "%d delivered #%d of %d (%s)" receiver seq sender (if cast then "cast" else "send")
  | Crashed e -> Fmt.pf ppf "%d crashed" e

let pp_violation ppf = function
  | Bad_endpoint { index; endpoint } ->
      Fmt.pf ppf "event %d: endpoint %d does not exist" index endpoint
  | Resent { index; sender; seq; first } ->
      Fmt.pf ppf "event %d: %d sent #%d again (first sent at event %d)" index sender seq first
  | Not_sent { index; receiver; sender; seq } ->
      Fmt.pf ppf "event %d: %d delivered #%d of %d, which %d had not sent" index receiver seq sender
        sender
  | Wrong_kind { index; receiver; sender; seq; sent } ->
      Fmt.pf ppf "event %d: %d delivered #%d of %d as a %s, but it was sent as a %a" index receiver
        seq sender
        (match sent with Cast -> "send" | Send _ -> "cast")
        pp_kind sent
  | Misaddressed { index; receiver; sender; seq; dst } ->
      Fmt.pf ppf "event %d: %d delivered #%d of %d, which was sent to %d only" index receiver seq
        sender dst
  | Duplicate { index; receiver; sender; seq; first } ->
      Fmt.pf ppf "event %d: %d delivered #%d of %d again (first at event %d)" index receiver seq
        sender first
  | Out_of_order { index; receiver; sender; seq; after } ->
      Fmt.pf ppf "event %d: %d delivered #%d of %d out of order, after #%d which %d sent later"
        index receiver seq sender after sender
  | Missing { receiver; sender; seq } ->
      Fmt.pf ppf "%d never delivered #%d of %d, though both stayed correct" receiver seq sender

(* One sent message. [pos] is its rank among its sender's messages;
   [first] holds, per addressee, the index of its first delivery or -1
   (one slot per endpoint for a cast, a single slot for a send). *)
type msg = { seq : int; kind : kind; pos : int; sent_at : int; first : int array }

type t = {
  n : int;
  msgs : (int, msg) Hashtbl.t array; (* per sender, by seq *)
  order : msg list array; (* per sender, latest first *)
  npos : int array; (* per sender, messages sent so far *)
  last_pos : int array; (* per (receiver, sender), highest [pos] delivered, or -1 *)
  last_seq : int array; (* the [seq] of that message *)
  crashed : bool array;
  mutable index : int;
  mutable found : violation list; (* latest first *)
}

let create ~n =
  if n < 1 then invalid_arg "Fifo.create: n < 1";
  {
    n;
    msgs = Array.init n (fun _ -> Hashtbl.create 64);
    order = Array.make n [];
    npos = Array.make n 0;
    last_pos = Array.make (n * n) (-1);
    last_seq = Array.make (n * n) (-1);
    crashed = Array.make n false;
    index = 0;
    found = [];
  }

let report t v = t.found <- v :: t.found
let valid t e = e >= 0 && e < t.n

let sent t index sender kind seq =
  match Hashtbl.find_opt t.msgs.(sender) seq with
  | Some m -> report t (Resent { index; sender; seq; first = m.sent_at })
  | None ->
      let slots = match kind with Cast -> t.n | Send _ -> 1 in
      let m =
        { seq; kind; pos = t.npos.(sender); sent_at = index; first = Array.make slots (-1) }
      in
      t.npos.(sender) <- t.npos.(sender) + 1;
      Hashtbl.add t.msgs.(sender) seq m;
      t.order.(sender) <- m :: t.order.(sender)

let delivered t index receiver sender cast seq =
  match Hashtbl.find_opt t.msgs.(sender) seq with
  | None -> report t (Not_sent { index; receiver; sender; seq })
  | Some m -> (
      let slot =
        match (m.kind, cast) with
        | Cast, true -> Some receiver
        | Send d, false when d = receiver -> Some 0
        | Send dst, false ->
            report t (Misaddressed { index; receiver; sender; seq; dst });
            None
        | Cast, false ->
            report t (Wrong_kind { index; receiver; sender; seq; sent = m.kind });
            Some receiver
        | Send d, true ->
            report t (Wrong_kind { index; receiver; sender; seq; sent = m.kind });
            if d = receiver then Some 0 else None
      in
      match slot with
      | None -> ()
      | Some slot ->
          if m.first.(slot) >= 0 then
            report t (Duplicate { index; receiver; sender; seq; first = m.first.(slot) })
          else begin
            m.first.(slot) <- index;
            let pair = (receiver * t.n) + sender in
            if m.pos < t.last_pos.(pair) then
              report t (Out_of_order { index; receiver; sender; seq; after = t.last_seq.(pair) })
            else begin
              t.last_pos.(pair) <- m.pos;
              t.last_seq.(pair) <- seq
            end
          end)

let add t e =
  let index = t.index in
  t.index <- index + 1;
  let bad endpoint = report t (Bad_endpoint { index; endpoint }) in
  match e with
  | Sent { sender; _ } when not (valid t sender) -> bad sender
  | Sent { kind = Send d; _ } when not (valid t d) -> bad d
  | Sent { sender; kind; seq } -> sent t index sender kind seq
  | Delivered { receiver; _ } when not (valid t receiver) -> bad receiver
  | Delivered { sender; _ } when not (valid t sender) -> bad sender
  | Delivered { receiver; sender; cast; seq } -> delivered t index receiver sender cast seq
  | Crashed e when not (valid t e) -> bad e
  | Crashed e -> t.crashed.(e) <- true

let events t = t.index
let violations t = List.rev t.found

let missing t =
  let acc = ref [] in
  for sender = t.n - 1 downto 0 do
    if not t.crashed.(sender) then
      List.iter
        (fun m ->
          let check receiver slot =
            if (not t.crashed.(receiver)) && m.first.(slot) < 0 then
              acc := Missing { receiver; sender; seq = m.seq } :: !acc
          in
          match m.kind with
          | Cast ->
              for r = t.n - 1 downto 0 do
                check r r
              done
          | Send d -> check d 0)
        t.order.(sender)
  done;
  !acc

let finish t = violations t @ missing t

let check ~n trace =
  let t = create ~n in
  List.iter (add t) trace;
  match finish t with [] -> Ok () | l -> Error l
