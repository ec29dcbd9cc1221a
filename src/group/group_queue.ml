(* The application's side of the group runtime: which messages it may hand
   over now (admission), the queue of those made while a view changes, and
   the flow control it is told of. *)

type error =
  | Flow_control
  | Too_big of { size : int; max : int }
  | Not_member of string
  | Leaving
  | Exited
  | Not_primary of string

type item = [ `Cast of string | `Send of string * string ]

type t = {
  flow : bool -> unit; (* the application's [flow] callback *)
  items : item Queue.t;
  mutable bytes : int; (* queued, each message counted 64 bytes more *)
  limit : int; (* group.queue *)
  mutable stack_flow : bool; (* the stack's flow control asks to pause *)
  mutable full : bool; (* a message was refused for lack of queue room *)
  mutable told : bool; (* what the application last heard *)
  mutable refused : int;
}

let create ~limit ~flow =
  {
    flow;
    items = Queue.create ();
    bytes = 0;
    limit;
    stack_flow = false;
    full = false;
    told = false;
    refused = 0;
  }

let length t = Queue.length t.items
let is_empty t = Queue.is_empty t.items
let refused t = t.refused
let size = function `Cast s -> String.length s | `Send (_, s) -> String.length s

let update_flow t ~exited =
  let b = t.stack_flow || t.full in
  if b <> t.told && not exited then begin
    t.told <- b;
    t.flow b
  end

let set_stack_flow t b = t.stack_flow <- b

(* Whether the application may hand over a message of [size] bytes now. A
   message refused here is counted by no layer. *)
let admit t ~exited ~leaving ~max_message ~blocked size =
  if exited then Error Exited
  else if leaving then Error Leaving
  else if size > max_message then Error (Too_big { size; max = max_message })
  else if t.stack_flow then Error Flow_control
  else if (blocked || not (Queue.is_empty t.items)) && t.bytes + size + 64 > t.limit then begin
    t.full <- true;
    update_flow t ~exited;
    Error Flow_control
  end
  else Ok ()

let refuse t e =
  t.refused <- t.refused + 1;
  Error e

let push t item =
  Queue.add item t.items;
  t.bytes <- t.bytes + size item + 64

let flush t ~ready f =
  while ready () && not (Queue.is_empty t.items) do
    let item = Queue.pop t.items in
    t.bytes <- t.bytes - size item - 64;
    f item
  done;
  if Queue.is_empty t.items then t.full <- false
