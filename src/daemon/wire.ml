let version = 2
let min_version = 1

type code =
  | Malformed
  | Version
  | Too_big
  | Flow_control
  | Not_member
  | Leaving
  | Exited
  | No_such_handle
  | Handle_in_use
  | Bad_props
  | Bad_params
  | Bad_address
  | Join_failed
  | Not_hello
  | Overloaded
  | Bad_switch
  | Not_primary
  | Not_allowed
  | Unknown_code of int

let codes =
  [
    (Malformed, 1, "malformed");
    (Version, 2, "version");
    (Too_big, 3, "too-big");
    (Flow_control, 4, "flow-control");
    (Not_member, 5, "not-member");
    (Leaving, 6, "leaving");
    (Exited, 7, "exited");
    (No_such_handle, 8, "no-such-handle");
    (Handle_in_use, 9, "handle-in-use");
    (Bad_props, 10, "bad-props");
    (Bad_params, 11, "bad-params");
    (Bad_address, 12, "bad-address");
    (Join_failed, 13, "join-failed");
    (Not_hello, 14, "not-hello");
    (Overloaded, 15, "overloaded");
    (Bad_switch, 16, "bad-switch");
    (Not_primary, 17, "not-primary");
    (Not_allowed, 18, "not-allowed");
  ]

let code_to_int = function
  | Unknown_code n -> n
  | c -> List.fold_left (fun acc (c', n, _) -> if c = c' then n else acc) 0 codes

let code_of_int n =
  match List.find_opt (fun (_, n', _) -> n = n') codes with
  | Some (c, _, _) -> c
  | None -> Unknown_code n

let code_name = function
  | Unknown_code n -> Printf.sprintf "code-%d" n
  | c -> List.fold_left (fun acc (c', _, s) -> if c = c' then s else acc) "" codes

type request =
  | Hello of { min_version : int; max_version : int; name : string; token : string }
  | Join of {
      handle : int;
      group : string;
      props : string;
      params : string;
      flags : int;
      peers : string list;
    }
  | Leave of { handle : int }
  | Cast of { handle : int; req : int; payload : string }
  | Send of { handle : int; req : int; dst : string; payload : string }
  | Suspect of { handle : int; ids : string list }
  | Block_ok of { handle : int }
  | Switch of { handle : int; props : string; params : string }
  | Ping of { cookie : int }

let flag_report = 1

type kind = [ `Cast | `Send ]

type event =
  | Hello_ok of { version : int; max_frame : int; max_queue : int; server : string }
  | Ok of { handle : int; value : int; info : string }
  | Error of { handle : int; code : code; reason : string }
  | Pong of { cookie : int }
  | View of {
      handle : int;
      vid : string;
      ltime : int;
      rank : int;
      coordinator : string;
      members : string list;
      joined : string list;
      left : string list;
      why : string list;
    }
  | Cast_up of { handle : int; origin : string; payload : string }
  | Send_up of { handle : int; origin : string; payload : string }
  | Block of { handle : int }
  | Flow of { handle : int; blocked : bool }
  | Exit of { handle : int }
  | Sent of { handle : int; req : int; kind : kind; view : string }
  | Lost of { handle : int; req : int; reason : string }
  | Refused of { handle : int; req : int; code : code; reason : string }

let no_handle = 0xffffffff

(* {1 Encoding}: each frame is sized first, then written once into bytes
   of exactly its size. *)

type w = { b : Bytes.t; mutable p : int }

let u8 w n =
  Bytes.unsafe_set w.b w.p (Char.unsafe_chr (n land 0xff));
  w.p <- w.p + 1

let u16 w n =
  Bytes.set_uint16_be w.b w.p (n land 0xffff);
  w.p <- w.p + 2

let u32 w n =
  Bytes.set_int32_be w.b w.p (Int32.of_int (n land 0xffffffff));
  w.p <- w.p + 4

let u64 w n =
  u32 w ((n lsr 32) land 0xffffffff);
  u32 w (n land 0xffffffff)

let str w s =
  u32 w (String.length s);
  Bytes.blit_string s 0 w.b w.p (String.length s);
  w.p <- w.p + String.length s

let strs w l =
  u32 w (List.length l);
  List.iter (str w) l

(* Sizes of the fields. *)
let s_str s = 4 + String.length s
let s_strs l = List.fold_left (fun n s -> n + s_str s) 4 l

(* The frame of [size] bytes of fields: its length, then the body [f]
   writes. *)
let frame ty size f =
  let w = { b = Bytes.create (5 + size); p = 0 } in
  u32 w (size + 1);
  u8 w ty;
  f w;
  assert (w.p = 5 + size);
  Bytes.unsafe_to_string w.b

let encode_request = function
  | Hello { min_version; max_version; name; token } ->
      (* The token only when there is one: a HELLO without is version 1's. *)
      frame 0x01
        (4 + s_str name + if token = "" then 0 else s_str token)
        (fun b ->
          u16 b min_version;
          u16 b max_version;
          str b name;
          if token <> "" then str b token)
  | Join { handle; group; props; params; flags; peers } ->
      frame 0x02
        (4 + s_str group + s_str props + s_str params + 4 + s_strs peers)
        (fun b ->
          u32 b handle;
          str b group;
          str b props;
          str b params;
          u32 b flags;
          strs b peers)
  | Leave { handle } -> frame 0x03 4 (fun b -> u32 b handle)
  | Cast { handle; req; payload } ->
      frame 0x04
        (8 + s_str payload)
        (fun b ->
          u32 b handle;
          u32 b req;
          str b payload)
  | Send { handle; req; dst; payload } ->
      frame 0x05
        (8 + s_str dst + s_str payload)
        (fun b ->
          u32 b handle;
          u32 b req;
          str b dst;
          str b payload)
  | Suspect { handle; ids } ->
      frame 0x06
        (4 + s_strs ids)
        (fun b ->
          u32 b handle;
          strs b ids)
  | Block_ok { handle } -> frame 0x07 4 (fun b -> u32 b handle)
  | Switch { handle; props; params } ->
      frame 0x08
        (4 + s_str props + s_str params)
        (fun b ->
          u32 b handle;
          str b props;
          str b params)
  | Ping { cookie } -> frame 0x09 4 (fun b -> u32 b cookie)

let kind_to_int = function `Cast -> 0 | `Send -> 1

(* CAST_UP and SEND_UP: a delivery to a member. *)
let delivery ty handle origin payload =
  frame ty
    (4 + s_str origin + s_str payload)
    (fun b ->
      u32 b handle;
      str b origin;
      str b payload)

let encode_event = function
  | Hello_ok { version; max_frame; max_queue; server } ->
      frame 0x81
        (10 + s_str server)
        (fun b ->
          u16 b version;
          u32 b max_frame;
          u32 b max_queue;
          str b server)
  | Ok { handle; value; info } ->
      frame 0x82
        (12 + s_str info)
        (fun b ->
          u32 b handle;
          u64 b value;
          str b info)
  | Error { handle; code; reason } ->
      frame 0x83
        (6 + s_str reason)
        (fun b ->
          u32 b handle;
          u16 b (code_to_int code);
          str b reason)
  | Pong { cookie } -> frame 0x84 4 (fun b -> u32 b cookie)
  | View { handle; vid; ltime; rank; coordinator; members; joined; left; why } ->
      frame 0xa1
        (4 + s_str vid + 8 + 4 + s_str coordinator + s_strs members + s_strs joined + s_strs left
       + s_strs why)
        (fun b ->
          u32 b handle;
          str b vid;
          u64 b ltime;
          u32 b rank;
          str b coordinator;
          strs b members;
          strs b joined;
          strs b left;
          strs b why)
  | Cast_up { handle; origin; payload } -> delivery 0xa2 handle origin payload
  | Send_up { handle; origin; payload } -> delivery 0xa3 handle origin payload
  | Block { handle } -> frame 0xa4 4 (fun b -> u32 b handle)
  | Flow { handle; blocked } ->
      frame 0xa5 5 (fun b ->
          u32 b handle;
          u8 b (if blocked then 1 else 0))
  | Exit { handle } -> frame 0xa6 4 (fun b -> u32 b handle)
  | Sent { handle; req; kind; view } ->
      frame 0xa7
        (9 + s_str view)
        (fun b ->
          u32 b handle;
          u32 b req;
          u8 b (kind_to_int kind);
          str b view)
  | Lost { handle; req; reason } ->
      frame 0xa8
        (8 + s_str reason)
        (fun b ->
          u32 b handle;
          u32 b req;
          str b reason)
  | Refused { handle; req; code; reason } ->
      frame 0xa9
        (10 + s_str reason)
        (fun b ->
          u32 b handle;
          u32 b req;
          u16 b (code_to_int code);
          str b reason)

(* {1 Decoding}: a cursor over the body; [Short] and [Bad] never escape. *)

exception Bad of string

type cur = { s : string; mutable pos : int; lim : int }

let need c n = if n < 0 || c.pos + n > c.lim then raise (Bad "truncated")

let g8 c =
  need c 1;
  let v = Char.code c.s.[c.pos] in
  c.pos <- c.pos + 1;
  v

let g16 c =
  let a = g8 c in
  (a lsl 8) lor g8 c

let g32 c =
  let a = g16 c in
  (a lsl 16) lor g16 c

let g64 c =
  let a = g32 c in
  if a lsr 30 <> 0 then raise (Bad "a 64-bit integer over 2^62");
  (a lsl 32) lor g32 c

let gstr c =
  let n = g32 c in
  need c n;
  let v = String.sub c.s c.pos n in
  c.pos <- c.pos + n;
  v

let gstrs c =
  let n = g32 c in
  (* Each element takes at least 4 bytes: a count beyond what is left is
     refused before anything is built. *)
  if n > (c.lim - c.pos) / 4 then raise (Bad "a list longer than its frame");
  List.init n (fun _ -> gstr c)

let gbool c =
  match g8 c with 0 -> false | 1 -> true | _ -> raise (Bad "a boolean that is neither 0 nor 1")

(* The body at [off], [len] bytes, of [s]. *)
let decode_sub f s off len =
  let c = { s; pos = off; lim = off + len } in
  match
    let ty = g8 c in
    let v = f c ty in
    if c.pos <> c.lim then raise (Bad (Printf.sprintf "%d bytes after the fields" (c.lim - c.pos)));
    v
  with
  | v -> Result.Ok v
  | exception Bad e -> Result.Error e

let decode f s = decode_sub f s 0 (String.length s)

let request_of c = function
  | 0x01 ->
      let min_version = g16 c in
      let max_version = g16 c in
      let name = gstr c in
      let token =
        if c.pos = c.lim then ""
        else
          let t = gstr c in
          if t = "" then raise (Bad "an empty token (a HELLO without one has no token field)");
          t
      in
      Hello { min_version; max_version; name; token }
  | 0x02 ->
      let handle = g32 c in
      let group = gstr c in
      let props = gstr c in
      let params = gstr c in
      let flags = g32 c in
      let peers = gstrs c in
      Join { handle; group; props; params; flags; peers }
  | 0x03 -> Leave { handle = g32 c }
  | 0x04 ->
      let handle = g32 c in
      let req = g32 c in
      Cast { handle; req; payload = gstr c }
  | 0x05 ->
      let handle = g32 c in
      let req = g32 c in
      let dst = gstr c in
      Send { handle; req; dst; payload = gstr c }
  | 0x06 ->
      let handle = g32 c in
      Suspect { handle; ids = gstrs c }
  | 0x07 -> Block_ok { handle = g32 c }
  | 0x08 ->
      let handle = g32 c in
      let props = gstr c in
      Switch { handle; props; params = gstr c }
  | 0x09 -> Ping { cookie = g32 c }
  | t -> raise (Bad (Printf.sprintf "unknown request type 0x%02x" t))

let decode_request = decode request_of

let event_of c = function
  | 0x81 ->
      let version = g16 c in
      let max_frame = g32 c in
      let max_queue = g32 c in
      Hello_ok { version; max_frame; max_queue; server = gstr c }
  | 0x82 ->
      let handle = g32 c in
      let value = g64 c in
      Ok { handle; value; info = gstr c }
  | 0x83 ->
      let handle = g32 c in
      let code = code_of_int (g16 c) in
      Error { handle; code; reason = gstr c }
  | 0x84 -> Pong { cookie = g32 c }
  | 0xa1 ->
      let handle = g32 c in
      let vid = gstr c in
      let ltime = g64 c in
      let rank = g32 c in
      let coordinator = gstr c in
      let members = gstrs c in
      let joined = gstrs c in
      let left = gstrs c in
      let why = gstrs c in
      View { handle; vid; ltime; rank; coordinator; members; joined; left; why }
  | 0xa2 ->
      let handle = g32 c in
      let origin = gstr c in
      Cast_up { handle; origin; payload = gstr c }
  | 0xa3 ->
      let handle = g32 c in
      let origin = gstr c in
      Send_up { handle; origin; payload = gstr c }
  | 0xa4 -> Block { handle = g32 c }
  | 0xa5 ->
      let handle = g32 c in
      Flow { handle; blocked = gbool c }
  | 0xa6 -> Exit { handle = g32 c }
  | 0xa7 ->
      let handle = g32 c in
      let req = g32 c in
      let kind =
        match g8 c with
        | 0 -> `Cast
        | 1 -> `Send
        | _ -> raise (Bad "a kind that is neither 0 nor 1")
      in
      Sent { handle; req; kind; view = gstr c }
  | 0xa8 ->
      let handle = g32 c in
      let req = g32 c in
      Lost { handle; req; reason = gstr c }
  | 0xa9 ->
      let handle = g32 c in
      let req = g32 c in
      let code = code_of_int (g16 c) in
      Refused { handle; req; code; reason = gstr c }
  | t -> raise (Bad (Printf.sprintf "unknown event type 0x%02x" t))

let decode_event = decode event_of

let pp_request ppf = function
  | Hello { min_version; max_version; name; token } ->
      (* The token is a secret: never printed. *)
      Fmt.pf ppf "HELLO %d-%d %S%s" min_version max_version name
        (if token = "" then "" else " (with a token)")
  | Join { handle; group; props; _ } -> Fmt.pf ppf "JOIN %d %S %S" handle group props
  | Leave { handle } -> Fmt.pf ppf "LEAVE %d" handle
  | Cast { handle; req; payload } ->
      Fmt.pf ppf "CAST %d #%d (%d bytes)" handle req (String.length payload)
  | Send { handle; req; dst; payload } ->
      Fmt.pf ppf "SEND %d #%d to %s (%d bytes)" handle req dst (String.length payload)
  | Suspect { handle; ids } -> Fmt.pf ppf "SUSPECT %d [%s]" handle (String.concat " " ids)
  | Block_ok { handle } -> Fmt.pf ppf "BLOCK_OK %d" handle
  | Switch { handle; props; _ } -> Fmt.pf ppf "SWITCH %d %S" handle props
  | Ping { cookie } -> Fmt.pf ppf "PING %d" cookie

(* {1 Framing} *)

type framer = {
  max : int;
  mutable buf : Bytes.t;
  mutable start : int;
  mutable stop : int;
  mutable room : int;  (** what {!read} asks for: doubled when a read fills it, halved when not *)
}

let framer ~max = { max; buf = Bytes.create 4096; start = 0; stop = 0; room = 4096 }
let buffered f = f.stop - f.start

(* Room for [want] more bytes at the end of the buffer. *)
let reserve f want =
  let have = f.stop - f.start in
  if f.stop + want > Bytes.length f.buf then begin
    let cap = ref (max 4096 (Bytes.length f.buf)) in
    while !cap < have + want do
      cap := 2 * !cap
    done;
    let nb = if !cap > Bytes.length f.buf then Bytes.create !cap else f.buf in
    Bytes.blit f.buf f.start nb 0 have;
    f.buf <- nb;
    f.start <- 0;
    f.stop <- have
  end

let feed f b off len =
  if len > 0 then begin
    reserve f len;
    Bytes.blit b off f.buf f.stop len;
    f.stop <- f.stop + len
  end

(* A connection that reads little keeps a small buffer; one that fills
   its reads gets larger ones, up to 64 KiB. *)
let read f fd =
  reserve f f.room;
  let n = Unix.read fd f.buf f.stop f.room in
  f.stop <- f.stop + n;
  if n = f.room then f.room <- min 65536 (2 * f.room)
  else if n < f.room / 2 then f.room <- max 4096 (f.room / 2);
  n

let next f =
  let have = f.stop - f.start in
  if have < 4 then `Need
  else
    let byte i = Char.code (Bytes.get f.buf (f.start + i)) in
    let n = (byte 0 lsl 24) lor (byte 1 lsl 16) lor (byte 2 lsl 8) lor byte 3 in
    if n = 0 then `Empty_frame
    else if n > f.max then `Too_big n
    else if have < 4 + n then `Need
    else begin
      let s = Bytes.sub_string f.buf (f.start + 4) n in
      f.start <- f.start + 4 + n;
      if f.start = f.stop then begin
        f.start <- 0;
        f.stop <- 0;
        (* Do not keep a large buffer for an idle client. *)
        if Bytes.length f.buf > max 65536 (2 * f.room) then f.buf <- Bytes.create 4096
      end;
      `Frame s
    end

(* The next frame decoded where it lies in the framer's bytes (no copy of
   the body). *)
let next_decoded dec f =
  let have = f.stop - f.start in
  if have < 4 then `Need
  else
    let n = Bytes.get_int32_be f.buf f.start |> Int32.to_int |> ( land ) 0xffffffff in
    if n = 0 then `Empty_frame
    else if n > f.max then `Too_big n
    else if have < 4 + n then `Need
    else begin
      let r = decode_sub dec (Bytes.unsafe_to_string f.buf) (f.start + 4) n in
      f.start <- f.start + 4 + n;
      if f.start = f.stop then begin
        f.start <- 0;
        f.stop <- 0;
        if Bytes.length f.buf > 2 * f.room then f.buf <- Bytes.create f.room
      end;
      `Frame r
    end

let next_request f = next_decoded request_of f
let next_event f = next_decoded event_of f

let skip f n =
  let k = min n (f.stop - f.start) in
  f.start <- f.start + k;
  if f.start = f.stop then begin
    f.start <- 0;
    f.stop <- 0
  end;
  k

let peek_u32 f off =
  if f.stop - f.start < off + 4 then None
  else
    let byte i = Char.code (Bytes.get f.buf (f.start + off + i)) in
    Some ((byte 0 lsl 24) lor (byte 1 lsl 16) lor (byte 2 lsl 8) lor byte 3)
