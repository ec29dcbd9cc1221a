let src = Logs.Src.create "consort.stack" ~doc:"Consort stacks"

module Log = (val Logs.src_log src : Logs.LOG)

type app = { deliver : Event.src -> Msg.t -> unit; ctl : Event.up_ctl -> unit }

(* One instantiated layer, its handlers closed over its state. [up] takes a
   message with this layer's header still in front. *)
type node = {
  lname : string;
  up : Event.src -> Msg.t -> unit;
  up_ctl : Event.up_ctl -> unit;
  dn : Event.dst -> Msg.t -> unit;
  dn_ctl : Event.dn_ctl -> unit;
  timer : Time.t -> unit;
  counters : unit -> (string * int) list;
}

type t = {
  view : View.t;
  nodes : node array;  (* bottom first *)
  dues : Time.t array;  (* when each node asked its timer to run; [max_int]: not asked *)
  mutable next_alarm : Time.t;
  names : string list;
}

let describe layers = String.concat ":" (List.map Layer.name layers)

let names ps = String.concat ", " (List.map Contract.name ps)

let check ?(requires = []) layers =
  let bottom_up = List.rev layers in
  let rec go avail below = function
    | [] -> (
        match List.find_opt (fun r -> not (List.exists (Contract.equal r) avail)) requires with
        | None -> Ok ()
        | Some r ->
            Error
              (Printf.sprintf
                 "stack %s does not provide %s (%s), which the application requires; it provides: %s"
                 (describe layers) (Contract.name r) (Contract.doc r)
                 (if avail = [] then "nothing" else names avail)))
    | l :: rest -> (
        match
          List.find_opt (fun r -> not (List.exists (Contract.equal r) avail)) (Layer.requires l)
        with
        | Some r ->
            Error
              (Printf.sprintf
                 "layer %s requires %s (%s) below it, but %s provide%s only: %s"
                 (Layer.name l) (Contract.name r) (Contract.doc r)
                 (match below with
                  | [] -> "the transport"
                  | _ -> "the layers under it (" ^ String.concat ":" below ^ ") and the transport")
                 (match below with [] -> "s" | _ -> "")
                 (names avail))
        | None -> go (avail @ Layer.provides l) (Layer.name l :: below) rest)
  in
  if layers = [] then Error "empty stack" else go [ Contract.net ] [] bottom_up

let instantiate (ctx : Layer.ctx) (st : t Lazy.t) nodes dues i ~net ~app (module L : Layer.S) =
  let n = Array.length nodes in
  let garbage = ref 0 in
  let out : L.header Layer.out =
    {
      up = (fun src msg -> if i = n - 1 then app.deliver src msg else nodes.(i + 1).up src msg);
      up_ctl = (fun e -> if i = n - 1 then app.ctl e else nodes.(i + 1).up_ctl e);
      dn =
        (fun dst h msg ->
          let msg = Msg.push L.codec h msg in
          if i = 0 then net dst msg else nodes.(i - 1).dn dst msg);
      dn_ctl =
        (fun e ->
          if i > 0 then nodes.(i - 1).dn_ctl e
          else
            match e with
            | Event.Block_req { round } ->
                (* The bottom of the stack: everything below has drained. *)
                nodes.(0).up_ctl (Event.Block_ok { round; parts = [] })
            | _ -> ());
      alarm =
        (fun at ->
          if at < dues.(i) then dues.(i) <- at;
          let st = Lazy.force st in
          if at < st.next_alarm then st.next_alarm <- at);
    }
  in
  let s = L.create ctx out in
  let ok = L.up s in
  let error e msg =
    incr garbage;
    Log.debug (fun m -> m "%s: dropped a message whose header %a" L.name Codec.pp_error e);
    Msg.release msg
  in
  {
    lname = L.name;
    up = (fun src msg -> Msg.pull_then L.codec msg src ~ok ~error);
    up_ctl = L.up_ctl s;
    dn = L.dn s;
    dn_ctl = L.dn_ctl s;
    timer = L.timer s;
    counters = (fun () -> ("garbage", !garbage) :: L.counters s);
  }

let create ?requires (ctx : Layer.ctx) layers ~net ~app =
  match check ?requires layers with
  | Error _ as e -> e
  | Ok () ->
      let bottom_up = Array.of_list (List.rev layers) in
      let n = Array.length bottom_up in
      let dummy =
        {
          lname = "";
          up = (fun _ _ -> ());
          up_ctl = ignore;
          dn = (fun _ _ -> ());
          dn_ctl = ignore;
          timer = ignore;
          counters = (fun () -> []);
        }
      in
      let nodes = Array.make n dummy in
      let dues = Array.make n max_int in
      let st =
        lazy { view = ctx.view; nodes; dues; next_alarm = max_int; names = List.map Layer.name layers }
      in
      Array.iteri (fun i l -> nodes.(i) <- instantiate ctx st nodes dues i ~net ~app l) bottom_up;
      Ok (Lazy.force st)

let top t = t.nodes.(Array.length t.nodes - 1)
let cast t msg = (top t).dn Event.Cast msg
let send t rank msg = (top t).dn (Event.Send rank) msg
let dn_ctl t e = (top t).dn_ctl e
let recv t msg = t.nodes.(0).up Event.Raw msg

(* Only the layers whose alarm is due run; each asks again for what it
   still needs. A layer's timer may make another ask for a time already
   past: [next_alarm] then says so and the driver comes back at once. *)
let timer t now =
  for i = 0 to Array.length t.nodes - 1 do
    if t.dues.(i) <= now then begin
      t.dues.(i) <- max_int;
      t.nodes.(i).timer now
    end
  done;
  let next = ref max_int in
  Array.iter (fun (d : Time.t) -> if d < !next then next := d) t.dues;
  t.next_alarm <- !next

let next_alarm t = t.next_alarm
let view t = t.view
let layers t = t.names
let counters t = List.rev (Array.to_list (Array.map (fun n -> (n.lname, n.counters ())) t.nodes))
