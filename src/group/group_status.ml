(* Status queries of the group runtime: the answers this member gives (counted a second) and the
   queries it has out. *)

open Consort

let max_queries = 4
let max_answers = 64 (* a second *)

type outcome = ((string * (string, string) result) list, string) result

(* A status query out: the members of view [vid] that have not answered yet, the answers so far. *)
type 'timer query = {
  nonce : string;
  vid : string;
  members : string array;
  mutable waiting : string list;
  mutable answers : (string * string) list;
  timeout : Time.t;
  k : outcome -> unit;
  mutable timer : 'timer option;
}

type 'timer t = {
  mutable handler : (unit -> string) option; (* what this member answers a status request *)
  mutable queries : 'timer query list; (* out, at most [max_queries] *)
  mutable window : Time.t; (* the second answers are counted in *)
  mutable answered : int; (* answers sent in that second *)
}

let create () = { handler = None; queries = []; window = 0; answered = 0 }
let set_handler t f = t.handler <- Some f

let json_string s =
  let b = Buffer.create (String.length s + 2) in
  Buffer.add_char b '"';
  String.iter
    (function
      | '"' -> Buffer.add_string b "\\\""
      | '\\' -> Buffer.add_string b "\\\\"
      | c when Char.code c < 0x20 || Char.code c = 0x7f ->
          Buffer.add_string b (Printf.sprintf "\\u%04x" (Char.code c))
      | c -> Buffer.add_char b c)
    s;
  Buffer.add_char b '"';
  Buffer.contents b

let mine t ~default =
  let s =
    match t.handler with Some f -> ( try f () with _ -> default ()) | None -> default ()
  in
  if String.length s > Side.max_status then
    Printf.sprintf {|{"error":"a status of %d bytes, over %d"}|} (String.length s) Side.max_status
  else s

let may_answer t ~now =
  if now - t.window >= Time.of_sec 1. then begin
    t.window <- now;
    t.answered <- 0
  end;
  if t.answered >= max_answers then false
  else begin
    t.answered <- t.answered + 1;
    true
  end

let refusal t =
  if List.length t.queries >= max_queries then
    Some (Printf.sprintf "%d status queries are under way already" max_queries)
  else None

let start t ~nonce ~vid ~members ~me ~timeout k =
  let q =
    {
      nonce;
      vid;
      members;
      waiting = List.filter (( <> ) (fst me)) (Array.to_list members);
      answers = [ me ];
      timeout;
      k;
      timer = None;
    }
  in
  t.queries <- q :: t.queries;
  q

let waiting q = q.waiting
let set_timer q tm = q.timer <- Some tm

let finish t ~cancel q =
  if List.memq q t.queries then begin
    t.queries <- List.filter (fun q' -> q' != q) t.queries;
    Option.iter cancel q.timer;
    let secs = Time.to_sec q.timeout in
    q.k
      (Ok
         (List.map
            (fun id ->
              match List.assoc_opt id q.answers with
              | Some s -> (id, Ok s)
              | None -> (id, Error (Printf.sprintf "no answer within %.1f s" secs)))
            (Array.to_list q.members)))
  end

let answer t ~cancel ~vid ~nonce ~eid status =
  match
    List.find_opt (fun q -> q.nonce = nonce && q.vid = vid && List.mem eid q.waiting) t.queries
  with
  | None -> false
  | Some q ->
      q.waiting <- List.filter (( <> ) eid) q.waiting;
      q.answers <- (eid, status) :: q.answers;
      if q.waiting = [] then finish t ~cancel q;
      true

let ask t ~nonce ~vid ~members ~me ~timeout ~cancel ~at ~ask k =
  let members = Array.copy members in
  let q = start t ~nonce ~vid ~members ~me ~timeout k in
  let finish () = finish t ~cancel q in
  if waiting q = [] then finish ()
  else begin
    set_timer q (at finish);
    Array.iteri (fun r id -> if id <> fst me then ask r id) members
  end

let default ~group ~me ~vid ~members ~rank ~blocked =
  Printf.sprintf {|{"group":%s,"me":%s,"view":%s,"members":[%s],"rank":%d,"blocked":%b}|}
    (json_string group) (json_string me) (json_string vid)
    (String.concat "," (List.map json_string (Array.to_list members)))
    rank blocked
