type op = Get | Put of string | Del | Cas of { expect : string; set : string }
type response = Ok | Value of string | Not_found | Cas_failed

type event = {
  client : int;
  key : string;
  op : op;
  call : int;
  return : int option;
  response : response option;
}

let pp_op ppf = function
  | Get -> Fmt.string ppf "get"
  | Put v -> Fmt.pf ppf "put %S" v
  | Del -> Fmt.string ppf "del"
  | Cas { expect; set } -> Fmt.pf ppf "cas %S %S" expect set

let pp_response ppf = function
  | Ok -> Fmt.string ppf "ok"
  | Value v -> Fmt.pf ppf "value %S" v
  | Not_found -> Fmt.string ppf "not-found"
  | Cas_failed -> Fmt.string ppf "cas-failed"

let pp_event ppf e =
  Fmt.pf ppf "client %d: %a %S at %d -> %a" e.client pp_op e.op e.key e.call
    Fmt.(option ~none:(any "unknown") (pair ~sep:(any " at ") pp_response int))
    (match (e.response, e.return) with Some r, Some t -> Some (r, t) | _ -> None)

let step v op =
  match (op, v) with
  | Get, Some x -> (Value x, v)
  | Get, None -> (Not_found, v)
  | Put x, _ -> (Ok, Some x)
  | Del, Some _ -> (Ok, None)
  | Del, None -> (Not_found, None)
  | Cas { expect; set }, Some x when x = expect -> (Ok, Some set)
  | Cas _, _ -> (Cas_failed, v)

type violation = { key : string; ops : int; linearized : int; stuck_at : event option }

let pp_violation ppf v =
  Fmt.pf ppf "key %S: %d operations, at most %d ordered%a" v.key v.ops v.linearized
    Fmt.(option (any "; cannot order next: " ++ pp_event))
    v.stuck_at

type result =
  | Linearizable
  | Not_linearizable of violation
  | Gave_up of { key : string; steps : int }

let pp_result ppf = function
  | Linearizable -> Fmt.string ppf "linearizable"
  | Not_linearizable v -> Fmt.pf ppf "not linearizable: %a" pp_violation v
  | Gave_up { key; steps } -> Fmt.pf ppf "gave up on key %S after %d steps" key steps

exception Stop of result

(* One key's operations, by Lowe's just-in-time linearization: a doubly
   linked list of call and return entries in time order; the first entry
   is a call that may be linearized now (its response must match the
   model's), or a return, whose call must have been linearized before:
   then the last choice is undone. *)
let check_key ~max_steps key (ops : event array) =
  let n = Array.length ops in
  (* Entries: 2i is the call of op i, 2i+1 its return. Unknown returns at
     the end. At equal times calls come first: such operations overlap. *)
  let time e =
    let o = ops.(e / 2) in
    if e land 1 = 0 then (o.call, 0) else ((match o.return with Some t -> t | None -> max_int), 1)
  in
  let order = Array.init (2 * n) Fun.id in
  Array.stable_sort (fun a b -> compare (time a) (time b)) order;
  let head = 2 * n and tail = (2 * n) + 1 in
  let next = Array.make ((2 * n) + 2) tail and prev = Array.make ((2 * n) + 2) head in
  let node = Array.make (2 * n) 0 in
  (* Nodes are positions in [order]. *)
  Array.iteri (fun k e -> node.(e) <- k) order;
  for k = 0 to (2 * n) - 1 do
    prev.(k) <- (if k = 0 then head else k - 1);
    next.(k) <- (if k = (2 * n) - 1 then tail else k + 1)
  done;
  if n > 0 then (
    next.(head) <- 0;
    prev.(tail) <- (2 * n) - 1)
  else next.(head) <- tail;
  let remove k =
    next.(prev.(k)) <- next.(k);
    prev.(next.(k)) <- prev.(k)
  in
  let restore k =
    next.(prev.(k)) <- k;
    prev.(next.(k)) <- k
  in
  let lift i =
    remove node.(2 * i);
    remove node.((2 * i) + 1)
  in
  let unlift i =
    restore node.((2 * i) + 1);
    restore node.(2 * i)
  in
  (* Known and unknown operations have separate bitsets: a configuration
     (known ones done, value, unknown ones done) is dominated by one with
     the same known ones and value and fewer unknown ones done, since those
     may still be done later or never. *)
  let slot = Array.make n 0 and nk = ref 0 and nu = ref 0 in
  Array.iteri
    (fun i o ->
      if o.return = None then (
        slot.(i) <- !nu;
        incr nu)
      else (
        slot.(i) <- !nk;
        incr nk))
    ops;
  let kbits = Bytes.make ((!nk + 7) / 8) '\000' and ubits = Bytes.make ((!nu + 7) / 8) '\000' in
  let bits i = if ops.(i).return = None then ubits else kbits in
  let set i =
    let b = bits i and j = slot.(i) in
    Bytes.set b (j lsr 3) (Char.chr (Char.code (Bytes.get b (j lsr 3)) lor (1 lsl (j land 7))))
  in
  let clear i =
    let b = bits i and j = slot.(i) in
    Bytes.set b (j lsr 3)
      (Char.chr (Char.code (Bytes.get b (j lsr 3)) land lnot (1 lsl (j land 7))))
  in
  let subset a b =
    let r = ref true and k = ref 0 in
    while !r && !k < Bytes.length a do
      let x = Char.code (Bytes.get a !k) in
      if x land Char.code (Bytes.get b !k) <> x then r := false;
      incr k
    done;
    !r
  in
  let cache : (string * string option, Bytes.t list) Hashtbl.t = Hashtbl.create 1024 in
  (* [seen c] is true if [c] with the current unknown set is dominated;
     otherwise it records it. *)
  let seen c =
    let l = Option.value (Hashtbl.find_opt cache c) ~default:[] in
    if List.exists (fun u -> subset u ubits) l then true
    else (
      Hashtbl.replace cache c (Bytes.copy ubits :: l);
      false)
  in
  let state = ref None in
  let stack = ref [] and depth = ref 0 in
  let best = ref 0 and stuck = ref None in
  let steps = ref 0 in
  let entry = ref next.(head) in
  try
    while next.(head) <> tail do
      incr steps;
      if !steps > max_steps then raise (Stop (Gave_up { key; steps = !steps }));
      let k = !entry in
      let e = order.(k) in
      let i = e / 2 in
      if e land 1 = 0 then begin
        let resp, s' = step !state ops.(i).op in
        let matches = match ops.(i).response with None -> true | Some r -> r = resp in
        if matches then begin
          set i;
          if not (seen (Bytes.to_string kbits, s')) then begin
            stack := (i, !state) :: !stack;
            incr depth;
            state := s';
            lift i;
            entry := next.(head)
          end
          else (
            clear i;
            entry := next.(k))
        end
        else entry := next.(k)
      end
      else if ops.(i).return = None then
        (* Only returns of unknown operations are left: each may be taken
           to happen after everything else, or never. *)
        raise (Stop Linearizable)
      else begin
        if !depth >= !best then (
          best := !depth;
          stuck := Some ops.(i));
        match !stack with
        | [] ->
            raise (Stop (Not_linearizable { key; ops = n; linearized = !best; stuck_at = !stuck }))
        | (j, s) :: rest ->
            stack := rest;
            decr depth;
            state := s;
            clear j;
            unlift j;
            entry := next.(node.(2 * j))
      end
    done;
    Linearizable
  with Stop r -> r

let check ?(max_steps = 50_000_000) events =
  let bad =
    List.find_opt
      (fun (e : event) ->
        match (e.return, e.response) with
        | Some r, Some _ -> r < e.call
        | None, None -> false
        | _ -> true)
      events
  in
  match bad with
  | Some e -> Not_linearizable { key = e.key; ops = 1; linearized = 0; stuck_at = Some e }
  | None ->
      let by_key = Hashtbl.create 64 in
      (* A get whose outcome is unknown changes nothing and shows nothing. *)
      let events = List.filter (fun (e : event) -> not (e.op = Get && e.response = None)) events in
      List.iter
        (fun (e : event) ->
          match Hashtbl.find_opt by_key e.key with
          | Some l -> l := e :: !l
          | None -> Hashtbl.add by_key e.key (ref [ e ]))
        events;
      let keys = Hashtbl.fold (fun k _ acc -> k :: acc) by_key [] |> List.sort compare in
      let rec go = function
        | [] -> Linearizable
        | k :: rest -> (
            match check_key ~max_steps k (Array.of_list (List.rev !(Hashtbl.find by_key k))) with
            | Linearizable -> go rest
            | r -> r)
      in
      go keys
