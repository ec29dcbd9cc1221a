open Consort
module Crypto = Consort_crypto.Crypto
module Aead = Consort_crypto.Chacha (* OpenSSL's, in mirage-crypto's format *)
module X25519 = Mirage_crypto_ec.X25519

let src = Logs.Src.create "consort.seal" ~doc:"Sealed datagrams"

module Log = (val Logs.src_log src : Logs.LOG)

type mode = Auth | Privacy

let pp_mode ppf = function Auth -> Fmt.string ppf "Auth" | Privacy -> Fmt.string ppf "Privacy"
let mode_byte = function Auth -> 1 | Privacy -> 2
let rekey_param = "seal.rekey"
let freshness_param = "seal.freshness"

let () =
  Params.register rekey_param (Params.Bool true)
    ~doc:
      "with Auth or Privacy: per-view keys (property Rekey), agreed at each view change, so that a \
       member that left or was excluded can neither read nor forge later views' traffic"

let () =
  Params.register freshness_param
    (Params.Time (Time.of_sec 60.))
    ~min:(Params.Time (Time.of_ms 100))
    ~doc:
      "with Auth or Privacy: the largest difference accepted between a sender's clock, as its \
       datagrams carry it, and this member's; a datagram further off is dropped (seal.stale) and \
       the member warns, at most every 10 s, naming the peer and the offset"

type secret = string

let secret_length = 32

let secret_of_string s =
  if String.length s = secret_length then Ok s
  else Error (Printf.sprintf "a group secret is %d bytes, not %d" secret_length (String.length s))

let pp_secret ppf s =
  Fmt.pf ppf "secret:%s" (String.sub (Crypto.to_hex (Crypto.sha256 [ "consort-key-id-v1"; s ])) 0 8)

let generate () = Crypto.random secret_length
let key_prefix = "consort-key-v1:"

let write_key path s =
  match Unix.openfile path [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL; Unix.O_CLOEXEC ] 0o600 with
  | exception Unix.Unix_error (Unix.EEXIST, _, _) ->
      Error (path ^ ": already exists (a key is never overwritten)")
  | exception Unix.Unix_error (e, _, _) ->
      Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
  | fd ->
      Fun.protect
        ~finally:(fun () -> Unix.close fd)
        (fun () ->
          let line =
            key_prefix ^ Base64.encode_string ~pad:false ~alphabet:Base64.uri_safe_alphabet s ^ "\n"
          in
          (* All of it, on the disk, or no file: a torn key left behind
             would be refused at every later start and never overwritten. *)
          let rec write_all off =
            if off < String.length line then
              write_all (off + Unix.write_substring fd line off (String.length line - off))
          in
          match
            Unix.fchmod fd 0o600;
            write_all 0;
            Unix.fsync fd
          with
          | () -> Ok ()
          | exception Unix.Unix_error (e, _, _) ->
              (try Unix.unlink path with Unix.Unix_error _ -> ());
              Error (Printf.sprintf "%s: %s" path (Unix.error_message e)))

(* Opened once (not following a FIFO into a block: O_NONBLOCK), and what
   is checked is the file the descriptor holds (fstat), not whatever the
   path names a moment before or after. *)
let read_private path =
  match Unix.openfile path [ Unix.O_RDONLY; Unix.O_NONBLOCK; Unix.O_CLOEXEC ] 0 with
  | exception Unix.Unix_error (e, _, _) ->
      Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
  | fd ->
      Fun.protect
        ~finally:(fun () -> try Unix.close fd with Unix.Unix_error _ -> ())
        (fun () ->
          match Unix.fstat fd with
          | exception Unix.Unix_error (e, _, _) ->
              Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
          | st when st.Unix.st_kind <> Unix.S_REG -> Error (path ^ ": not a regular file")
          | st when st.Unix.st_uid <> Unix.geteuid () && st.Unix.st_uid <> 0 ->
              Error
                (Printf.sprintf
                   "%s: owned by uid %d, not by this user (uid %d) or root: whoever owns it can \
                    change it"
                   path st.Unix.st_uid (Unix.geteuid ()))
          | st when st.Unix.st_perm land 0o077 <> 0 ->
              Error
                (Printf.sprintf "%s: mode %o lets others read or write it; chmod 600 it" path
                   st.Unix.st_perm)
          | st when st.Unix.st_size > 4096 -> Error (path ^ ": too large for a key file")
          | st -> (
              let b = Bytes.create st.Unix.st_size in
              let rec go off =
                if off = Bytes.length b then off
                else
                  match Unix.read fd b off (Bytes.length b - off) with 0 -> off | n -> go (off + n)
              in
              match go 0 with
              | n -> Ok (Bytes.sub_string b 0 n)
              | exception Unix.Unix_error (e, _, _) ->
                  Error (Printf.sprintf "%s: %s" path (Unix.error_message e))))

let read_key path =
  match read_private path with
  | Error e -> Error e
  | Ok s -> (
      let s = String.trim s in
      let n = String.length key_prefix in
      if String.length s < n || String.sub s 0 n <> key_prefix then
        Error (path ^ ": not a Consort key file (consort keygen writes one)")
      else
        match
          Base64.decode ~pad:false ~alphabet:Base64.uri_safe_alphabet
            (String.sub s n (String.length s - n))
        with
        | Error _ -> Error (path ^ ": the key is not valid base64url")
        | Ok k -> (
            match secret_of_string k with Ok k -> Ok k | Error e -> Error (path ^ ": " ^ e)))

type stats = {
  sealed : int;
  opened : int;
  malformed : int;
  clear : int;
  bad_tag : int;
  wrong_mode : int;
  replayed : int;
  stale : int;
  unknown_key : int;
  wrong_key : int;
  unsent : int;
  rekeys : int;
}

let pp_stats ppf s =
  Fmt.pf ppf
    "sealed=%d opened=%d malformed=%d clear=%d bad_tag=%d wrong_mode=%d replayed=%d stale=%d \
     unknown_key=%d wrong_key=%d unsent=%d rekeys=%d"
    s.sealed s.opened s.malformed s.clear s.bad_tag s.wrong_mode s.replayed s.stale s.unknown_key
    s.wrong_key s.unsent s.rekeys

let stats_list (s : stats) =
  [
    ("sealed", s.sealed);
    ("opened", s.opened);
    ("malformed", s.malformed);
    ("clear", s.clear);
    ("bad_tag", s.bad_tag);
    ("wrong_mode", s.wrong_mode);
    ("replayed", s.replayed);
    ("stale", s.stale);
    ("unknown_key", s.unknown_key);
    ("wrong_key", s.wrong_key);
    ("unsent", s.unsent);
    ("rekeys", s.rekeys);
  ]

let magic = 0xC5
let header_length = 34
let kid_length = 8

(* Under a view key, the header ends with the key's id. *)
let view_header_length = header_length + kid_length
let tag_length = 16

(* Privacy encrypts a marker byte before the payload, so that the AEAD
   never sees an empty plaintext. *)
let overhead = header_length + 1 + tag_length
let overhead_rekeyed = view_header_length + 1 + tag_length
let id_length = 16
let window = 1024
let max_senders = 4096

(* The key a sender seals under: its own, so nonces never repeat across
   senders. *)
type keys = { aead : Aead.key }

(* Length-prefixed, so that no two field lists hash alike. *)
let field s =
  let b = Bytes.create 4 in
  Bytes.set_int32_be b 0 (Int32.of_int (String.length s));
  Bytes.to_string b ^ s

(* Bound to the group's name: two groups that share a key file do not
   open each other's datagrams. *)
let sender_key secret ~group id =
  {
    aead =
      Aead.of_secret
        (Cstruct.of_string (Crypto.hmac ~key:secret [ "consort-seal-v2"; field group; field id ]));
  }

(* The marker byte both modes encrypt: with Privacy before the payload,
   with Auth alone (the header and the payload are then associated data),
   so that the AEAD never sees an empty plaintext. *)
let marker = Cstruct.of_string "\000"

let nonce counter =
  let n = Cstruct.create 12 in
  Cstruct.BE.set_uint64 n 4 counter;
  n

(* What a receiver remembers of a sender: its keys (under the group
   secret; under the current view key, with the key's id), the highest
   counter seen and which of the [window] counters below it arrived. One
   counter runs over both keys, so one window serves both. *)
type peer = {
  mutable skey : keys option;
  mutable vkey : (string * keys) option;
  mutable top : int64;
  seen : Bytes.t; (* window bits *)
}

(* {1 Per-view keys (Rekey)} *)

(* A view key and its id (public: a digest of the key). *)
type view_key = { kid : string; vk : string }

(* The keys of one member: its X25519 key pair, drawn when the transport
   is made (each process start), and the key of its current view. Nothing
   here has a printer. *)
type ring = {
  priv : X25519.secret;
  public : string;
  g : Mirage_crypto_rng.g option;
  mutable current : view_key option;
  mutable rekeys : int;
}

let make_ring g =
  match X25519.secret_of_cs (Cstruct.of_string (Crypto.random ?g 32)) with
  | Ok (priv, public) -> { priv; public = Cstruct.to_string public; g; current = None; rekeys = 0 }
  | Error _ -> invalid_arg "Seal: X25519 refused 32 random bytes"

let kid_of vk = String.sub (Crypto.hmac ~key:vk [ "consort-seal-kid-v1" ]) 0 kid_length

(* A view's per-sender key: as under the group secret, with the view key. *)
let view_sender_key vk ~group id =
  {
    aead =
      Aead.of_secret
        (Cstruct.of_string (Crypto.hmac ~key:vk [ "consort-seal-view-v2"; field group; field id ]));
  }

let activate ring vk () =
  ring.current <- Some { kid = kid_of vk; vk };
  ring.rekeys <- ring.rekeys + 1

(* The key a view key is wrapped under for one member: HMAC-SHA256 (an
   HKDF extract) of the X25519 shared secret of maker and member, over the
   view, both ids, both public keys and the digest of the Install it
   travels in. *)
let wrap_key ~shared ~vid ~maker ~maker_pub ~member ~member_pub ~context =
  Aead.of_secret
    (Cstruct.of_string
       (Crypto.hmac ~key:(Cstruct.to_string shared)
          [
            "consort-rekey-v1";
            field vid;
            field maker;
            field member;
            field maker_pub;
            field member_pub;
            field (Crypto.sha256 [ context ]);
          ]))

let view_key_length = 32
let wrap_nonce_length = 12
let wrapped_length = wrap_nonce_length + view_key_length + tag_length

let draw ring ~vid ~me ~context members =
  let vk = Crypto.random ?g:ring.g view_key_length in
  let wrapped =
    List.filter_map
      (fun (eid, pub) ->
        match X25519.key_exchange ring.priv (Cstruct.of_string pub) with
        | Error _ -> None (* no key, or not a point: that member gets no key *)
        | Ok shared ->
            let key =
              wrap_key ~shared ~vid ~maker:me ~maker_pub:ring.public ~member:eid ~member_pub:pub
                ~context
            in
            let nonce = Crypto.random ?g:ring.g wrap_nonce_length in
            let sealed =
              Aead.authenticate_encrypt ~key ~nonce:(Cstruct.of_string nonce) (Cstruct.of_string vk)
            in
            Some (eid, nonce ^ Cstruct.to_string sealed))
      members
  in
  (wrapped, activate ring vk)

let unwrap ring ~vid ~me ~context ~installer:(maker, maker_pub) wrapped =
  if String.length wrapped <> wrapped_length then None
  else
    match X25519.key_exchange ring.priv (Cstruct.of_string maker_pub) with
    | Error _ -> None
    | Ok shared -> (
        let key =
          wrap_key ~shared ~vid ~maker ~maker_pub ~member:me ~member_pub:ring.public ~context
        in
        let nonce = Cstruct.of_string (String.sub wrapped 0 wrap_nonce_length) in
        match
          Aead.authenticate_decrypt ~key ~nonce
            (Cstruct.of_string
               (String.sub wrapped wrap_nonce_length (wrapped_length - wrap_nonce_length)))
        with
        | Some vk when Cstruct.length vk = view_key_length ->
            Some (activate ring (Cstruct.to_string vk))
        | Some _ | None -> None)

let side_magic = Consort_group.Side.magic

(* Under the group secret, with Rekey: the side channel's datagrams, and
   those between the servers of a client-server group and their clients,
   which hold the secret but no view key (Consort_group.Cltsvr). *)
let under_secret b = b = side_magic || b = Consort_group.Group.client_magic

(* The first byte of what a datagram carries: the side channel's magic or
   a stack's. *)
let first_byte msg =
  let b, off, len = Msg.headers msg in
  if len > 0 then Char.code (Bytes.get b off)
  else
    let r = ref (-1) in
    Msg.iter_body
      (fun buf o l -> if !r < 0 && l > 0 then r := Char.code (Bigarray.Array1.get buf o))
      msg;
    !r

let bit_index c = Int64.to_int (Int64.rem c (Int64.of_int window))
let get_bit b i = Char.code (Bytes.get b (i lsr 3)) land (1 lsl (i land 7)) <> 0

let set_bit b i v =
  let c = Char.code (Bytes.get b (i lsr 3)) in
  Bytes.set b (i lsr 3)
    (Char.chr (if v then c lor (1 lsl (i land 7)) else c land lnot (1 lsl (i land 7))))

(* Accepts [c] once: false for a counter seen, or too old to tell. *)
let accept_counter p c =
  if Int64.compare c p.top > 0 then begin
    (* Clear the bits of the counters skipped over, then mark [c]. *)
    let gap = Int64.sub c p.top in
    if Int64.compare gap (Int64.of_int window) >= 0 then
      Bytes.fill p.seen 0 (Bytes.length p.seen) '\000'
    else begin
      let x = ref (Int64.succ p.top) in
      while Int64.compare !x c <= 0 do
        set_bit p.seen (bit_index !x) false;
        x := Int64.succ !x
      done
    end;
    p.top <- c;
    set_bit p.seen (bit_index c) true;
    true
  end
  else if Int64.compare (Int64.sub p.top c) (Int64.of_int window) >= 0 then false
  else if get_bit p.seen (bit_index c) then false
  else begin
    set_bit p.seen (bit_index c) true;
    true
  end

(* {1 What a member holds} *)

type held = { h_secret : secret; h_mode : mode; h_group : string; h_view : view_key option }

(* The payload of sealed bytes under [key] (mode byte [m], header [h]). *)
let verify key m h cs =
  let len = Cstruct.length cs in
  let nonce = nonce (Cstruct.BE.get_uint64 cs 18) in
  if m mod 2 = 0 then
    match
      Aead.authenticate_decrypt ~key:key.aead ~nonce ~adata:(Cstruct.sub cs 0 h)
        (Cstruct.sub cs h (len - h))
    with
    | Some plain when Cstruct.length plain >= 1 && Cstruct.get_uint8 plain 0 = 0 ->
        Some (Cstruct.to_string ~off:1 plain)
    | Some _ | None -> None
  else
    let plen = len - h - 1 - tag_length in
    match
      Aead.authenticate_decrypt ~key:key.aead ~nonce
        ~adata:(Cstruct.sub cs 0 (h + plen))
        (Cstruct.sub cs (h + plen) (1 + tag_length))
    with
    | Some plain when Cstruct.length plain = 1 && Cstruct.get_uint8 plain 0 = 0 ->
        Some (Cstruct.to_string ~off:h ~len:plen cs)
    | Some _ | None -> None

let open_held held s =
  let cs = Cstruct.of_string s in
  let len = Cstruct.length cs in
  if len < 2 || Cstruct.get_uint8 cs 0 <> magic then None
  else
    let m = Cstruct.get_uint8 cs 1 in
    let h = if m >= 3 then view_header_length else header_length in
    if m < 1 || m > 4 || len < h + 1 + tag_length then None
    else
      let id = Cstruct.to_string ~off:2 ~len:id_length cs in
      let group = held.h_group in
      if m < 3 then verify (sender_key held.h_secret ~group id) m h cs
      else
        match held.h_view with
        | Some v when v.kid = Cstruct.to_string ~off:header_length ~len:kid_length cs ->
            verify (view_sender_key v.vk ~group id) m h cs
        | _ -> None

let seal_held held ~under ~id ~counter ~wall_ms payload =
  let key, kid =
    match (under, held.h_view) with
    | `Secret, _ -> (Some (sender_key held.h_secret ~group:held.h_group id), None)
    | `View, Some v -> (Some (view_sender_key v.vk ~group:held.h_group id), Some v.kid)
    | `View, None -> (None, None)
  in
  match key with
  | None -> None
  | Some key ->
      let h = if kid = None then header_length else view_header_length in
      let len = String.length payload in
      let cs = Cstruct.create (h + len + 1 + tag_length) in
      Cstruct.set_uint8 cs 0 magic;
      Cstruct.set_uint8 cs 1 (mode_byte held.h_mode + if kid = None then 0 else 2);
      Cstruct.blit_from_string id 0 cs 2 id_length;
      Cstruct.BE.set_uint64 cs 18 counter;
      Cstruct.BE.set_uint64 cs 26 wall_ms;
      Option.iter (fun kid -> Cstruct.blit_from_string kid 0 cs header_length kid_length) kid;
      let nonce = nonce counter in
      (match held.h_mode with
      | Privacy ->
          Cstruct.blit_from_string payload 0 cs (h + 1) len;
          let sealed =
            Aead.authenticate_encrypt ~key:key.aead ~nonce ~adata:(Cstruct.sub cs 0 h)
              (Cstruct.sub cs h (len + 1))
          in
          Cstruct.blit sealed 0 cs h (Cstruct.length sealed)
      | Auth ->
          Cstruct.blit_from_string payload 0 cs h len;
          let tag =
            Aead.authenticate_encrypt ~key:key.aead ~nonce
              ~adata:(Cstruct.sub cs 0 (h + len))
              marker
          in
          Cstruct.blit tag 0 cs (h + len) (Cstruct.length tag));
      Some (Cstruct.to_string cs)

module Ids = Consort.Lru.Make (struct
  type t = string

  let equal = String.equal
  let hash = Hashtbl.hash
end)

module Make (T : Transport.S) = struct
  type address = T.address

  let pp_address = T.pp_address
  let equal_address = T.equal_address
  let address_to_string = T.address_to_string
  let address_of_string = T.address_of_string

  type t = {
    inner : T.t;
    seal : (secret * mode) option;
    group : string; (* bound into every key *)
    freshness : Time.t;
    wall : unit -> float;
    pool : Pool.t;
    ring : ring option; (* with Rekey *)
    g : Mirage_crypto_rng.g option;
  }

  let wrap ?(freshness = Time.of_sec 60.) ?(wall = Unix.gettimeofday) ?(rekey = false) ?g
      ?(group = "") inner seal =
    let ring = match seal with Some _ when rekey -> Some (make_ring g) | _ -> None in
    { inner; seal; group; freshness; wall; pool = Pool.create ~name:"seal" (); ring; g }

  let freshness t = t.freshness

  let rekey t : Consort_group.Group.rekey option =
    Option.map
      (fun ring ->
        { Consort_group.Group.public = ring.public; draw = draw ring; unwrap = unwrap ring })
      t.ring

  let inner t = t.inner

  let held t =
    Option.map
      (fun (h_secret, h_mode) ->
        { h_secret; h_mode; h_group = t.group; h_view = Option.bind t.ring (fun r -> r.current) })
      t.seal

  type counts = {
    mutable sealed : int;
    mutable opened : int;
    mutable malformed : int;
    mutable clear : int;
    mutable bad_tag : int;
    mutable wrong_mode : int;
    mutable replayed : int;
    mutable stale : int;
    mutable unknown_key : int;
    mutable wrong_key : int;
    mutable unsent : int;
  }

  type connection = {
    c : T.connection;
    t : t;
    id : string;
    key : keys option; (* this sender's *)
    mutable vsend : (string * keys) option;
        (* this sender's under the current view key, and its id *)
    mutable counter : int64;
    peers : peer Ids.t;
    n : counts;
    mutable stale_warned : Time.t option; (* the last warning of a clock off *)
  }

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

  let now t = T.now t.inner
  let at t time f = T.at t.inner time f
  let cancel = T.cancel

  let stats c : stats =
    let n = c.n in
    {
      sealed = n.sealed;
      opened = n.opened;
      malformed = n.malformed;
      clear = n.clear;
      bad_tag = n.bad_tag;
      wrong_mode = n.wrong_mode;
      replayed = n.replayed;
      stale = n.stale;
      unknown_key = n.unknown_key;
      wrong_key = n.wrong_key;
      unsent = n.unsent;
      rekeys = (match c.t.ring with Some r -> r.rekeys | None -> 0);
    }

  let senders c = Ids.length c.peers
  let wall_ms t = Int64.of_float (t.wall () *. 1000.)

  (* The sealed form of [msg]'s bytes, written into one buffer: the header,
     then the payload (with Privacy, after the marker), then the tag. With
     Rekey, a stack's datagram goes under the current view key (none yet:
     not sent, [None]), the side channel's under the group secret. *)
  let seal_msg c secret_mode msg =
    let _, mode = secret_mode in
    let under =
      match c.t.ring with
      | Some ring when not (under_secret (first_byte msg)) -> (
          match ring.current with
          | None -> None
          | Some v ->
              let k =
                match c.vsend with
                | Some (kid, k) when kid = v.kid -> k
                | _ ->
                    let k = view_sender_key v.vk ~group:c.t.group c.id in
                    c.vsend <- Some (v.kid, k);
                    k
              in
              Some (k, Some v.kid))
      | _ -> Some (Option.get c.key, None)
    in
    match under with
    | None ->
        c.n.unsent <- c.n.unsent + 1;
        None
    | Some (key, kid) ->
        let key = key.aead in
        let h = match kid with Some _ -> view_header_length | None -> header_length in
        c.counter <- Int64.succ c.counter;
        let len = Msg.length msg in
        let v = Pool.alloc c.t.pool (len + h + 1 + tag_length) in
        let cs = Iovec.cstruct v in
        Cstruct.set_uint8 cs 0 magic;
        Cstruct.set_uint8 cs 1 (mode_byte mode + match kid with Some _ -> 2 | None -> 0);
        Cstruct.blit_from_string c.id 0 cs 2 id_length;
        Cstruct.BE.set_uint64 cs 18 c.counter;
        Cstruct.BE.set_uint64 cs 26 (wall_ms c.t);
        Option.iter (fun kid -> Cstruct.blit_from_string kid 0 cs header_length kid_length) kid;
        let nonce = nonce c.counter in
        (match mode with
        | Privacy ->
            Cstruct.set_uint8 cs h 0;
            ignore (Msg.blit_to msg cs (h + 1));
            let sealed =
              Aead.authenticate_encrypt ~key ~nonce ~adata:(Cstruct.sub cs 0 h)
                (Cstruct.sub cs h (len + 1))
            in
            Cstruct.blit sealed 0 cs h (Cstruct.length sealed)
        | Auth ->
            ignore (Msg.blit_to msg cs h);
            let tag =
              Aead.authenticate_encrypt ~key ~nonce ~adata:(Cstruct.sub cs 0 (h + len)) marker
            in
            Cstruct.blit tag 0 cs (h + len) (Cstruct.length tag));
        c.n.sealed <- c.n.sealed + 1;
        Some (Msg.of_iovec v)

  let with_sealed c msg f =
    match c.t.seal with
    | None -> f msg
    | Some sm -> (
        match seal_msg c sm msg with
        | None -> Ok ()
        | Some m -> Fun.protect ~finally:(fun () -> Msg.release m) (fun () -> f m))

  (* In clear, no closure per datagram. *)
  let send c ~dst msg =
    match c.t.seal with
    | None -> T.send c.c ~dst msg
    | Some _ -> with_sealed c msg (fun m -> T.send c.c ~dst m)

  let cast c ~dsts msg =
    match c.t.seal with
    | None -> T.cast c.c ~dsts msg
    | Some _ -> with_sealed c msg (fun m -> T.cast c.c ~dsts m)

  let close c = T.close c.c
  let control c = T.control c.c

  let query c =
    let i = T.query c.c in
    match (c.t.seal, c.t.ring) with
    | None, _ -> i
    | Some _, None -> { i with mtu = i.mtu - overhead }
    | Some _, Some _ -> { i with mtu = i.mtu - overhead_rekeyed }

  (* Where the payload of a received datagram is, or [None] (counted):
     [`In_place (off, len)] (Auth: the datagram's own bytes) or
     [`Decrypted cs] (Privacy). *)
  let stale_warning_interval = Time.of_sec 10.

  (* A datagram that opened but whose clock is off by [skew_ms]: said at most
     every 10 s per connection, naming the peer and the offset, unless it is
     a replay of a counter already seen (that says nothing of the clocks). *)
  let warn_stale c ~src ~id ~known ~counter ~skew_ms =
    let replay = match known with Some p -> Int64.compare counter p.top <= 0 | None -> false in
    let now = T.now c.t.inner in
    let due =
      match c.stale_warned with Some t0 -> now - t0 >= stale_warning_interval | None -> true
    in
    if (not replay) && due then begin
      c.stale_warned <- Some now;
      Log.warn (fun m ->
          m
            "datagrams from %s (sender %s) are dated %.1f s %s this member's clock, beyond %s=%a: \
             dropped (seal.stale=%d); check the clocks"
            src
            (String.sub (Crypto.to_hex id) 0 8)
            (Float.abs (Int64.to_float skew_ms /. 1000.))
            (if Int64.compare skew_ms 0L > 0 then "ahead of" else "behind")
            freshness_param Time.pp c.t.freshness c.n.stale)
    end

  let unseal c ~src (secret, mode) cs =
    let n = c.n in
    let len = Cstruct.length cs in
    if len = 0 || Cstruct.get_uint8 cs 0 <> magic then begin
      n.clear <- n.clear + 1;
      None
    end
    else if len < 2 || Cstruct.get_uint8 cs 1 < 1 || Cstruct.get_uint8 cs 1 > 4 then begin
      n.malformed <- n.malformed + 1;
      None
    end
    else
      let m = Cstruct.get_uint8 cs 1 in
      (* Modes 3 and 4: Auth and Privacy under a view key. *)
      let viewed = m >= 3 in
      let h = if viewed then view_header_length else header_length in
      if len < h + 1 + tag_length then begin
        n.malformed <- n.malformed + 1;
        None
      end
      else
        let id = Cstruct.to_string ~off:2 ~len:id_length cs in
        let counter = Cstruct.BE.get_uint64 cs 18 in
        let sent_at = Cstruct.BE.get_uint64 cs 26 in
        let known = Ids.find c.peers id in
        (* The key: under the group secret, or under the current view's key
           (any other view's, earlier or later, is not held: dropped before
           any work). *)
        let key =
          if not viewed then
            Some
              (match known with
              | Some { skey = Some k; _ } -> (k, None)
              | _ -> (sender_key secret ~group:c.t.group id, None))
          else
            let kid = Cstruct.to_string ~off:header_length ~len:kid_length cs in
            match c.t.ring with
            | Some { current = Some v; _ } when v.kid = kid -> (
                match known with
                | Some { vkey = Some (k', key); _ } when k' = kid -> Some (key, Some kid)
                | _ -> Some (view_sender_key v.vk ~group:c.t.group id, Some kid))
            | _ -> None
        in
        match key with
        | None ->
            n.unknown_key <- n.unknown_key + 1;
            None
        | Some (key, kid) -> (
            let nonce = nonce counter in
            let opened =
              if m mod 2 = 0 then
                match
                  Aead.authenticate_decrypt ~key:key.aead ~nonce ~adata:(Cstruct.sub cs 0 h)
                    (Cstruct.sub cs h (len - h))
                with
                | Some plain when Cstruct.length plain >= 1 && Cstruct.get_uint8 plain 0 = 0 ->
                    Some (`Decrypted (Cstruct.shift plain 1))
                | Some _ | None -> None
              else
                let plen = len - h - 1 - tag_length in
                match
                  Aead.authenticate_decrypt ~key:key.aead ~nonce
                    ~adata:(Cstruct.sub cs 0 (h + plen))
                    (Cstruct.sub cs (h + plen) (1 + tag_length))
                with
                | Some plain when Cstruct.length plain = 1 && Cstruct.get_uint8 plain 0 = 0 ->
                    Some (`In_place (h, plen))
                | Some _ | None -> None
            in
            match opened with
            | None ->
                n.bad_tag <- n.bad_tag + 1;
                None
            | Some payload ->
                let side =
                  match payload with
                  | `Decrypted p -> Cstruct.length p > 0 && under_secret (Cstruct.get_uint8 p 0)
                  | `In_place (off, plen) -> plen > 0 && under_secret (Cstruct.get_uint8 cs off)
                in
                if 2 - (m mod 2) <> mode_byte mode then begin
                  n.wrong_mode <- n.wrong_mode + 1;
                  None
                end
                else if c.t.ring <> None && viewed = side then begin
                  (* With Rekey, the group secret seals the side channel
                     only, and a view key a stack's datagrams only: a
                     holder of the secret alone (a member since excluded)
                     cannot pass a datagram to a stack. *)
                  n.wrong_key <- n.wrong_key + 1;
                  None
                end
                else
                  let offset = Int64.sub sent_at (wall_ms c.t) in
                  let skew = Int64.abs offset in
                  if Int64.compare skew (Int64.of_int (c.t.freshness / 1_000_000)) > 0 then begin
                    n.stale <- n.stale + 1;
                    warn_stale c ~src:(src ()) ~id ~known ~counter ~skew_ms:offset;
                    None
                  end
                  else
                    let p =
                      match known with
                      | Some p -> p
                      | None ->
                          let p =
                            {
                              skey = None;
                              vkey = None;
                              top = 0L;
                              seen = Bytes.make (window / 8) '\000';
                            }
                          in
                          Ids.add c.peers id p;
                          p
                    in
                    (match kid with
                    | Some kid -> p.vkey <- Some (kid, key)
                    | None -> p.skey <- Some key);
                    if id = c.id || not (accept_counter p counter) then begin
                      n.replayed <- n.replayed + 1;
                      None
                    end
                    else begin
                      n.opened <- n.opened + 1;
                      Some payload
                    end)

  let open_ t addr f =
    let self = ref None in
    let id = Crypto.random ?g:t.g id_length in
    let key = Option.map (fun (s, _) -> sender_key s ~group:t.group id) t.seal in
    let peers = Ids.create max_senders in
    let n =
      {
        sealed = 0;
        opened = 0;
        malformed = 0;
        clear = 0;
        bad_tag = 0;
        wrong_mode = 0;
        replayed = 0;
        stale = 0;
        unknown_key = 0;
        wrong_key = 0;
        unsent = 0;
      }
    in
    let wrap_handler tc =
      let c = { c = tc; t; id; key; vsend = None; counter = 0L; peers; n; stale_warned = None } in
      self := Some c;
      let h = f c in
      match t.seal with
      | None -> h
      | Some sm ->
          {
            T.recv =
              (fun ~src v ->
                let opened =
                  unseal c ~src:(fun () -> T.address_to_string src) sm (Iovec.cstruct v)
                in
                match opened with
                | None ->
                    Log.debug (fun m -> m "dropped a datagram from %a" T.pp_address src);
                    Iovec.release v
                | Some (`In_place (off, len)) ->
                    let out = Iovec.sub v ~off ~len in
                    Iovec.release v;
                    h.recv ~src out
                | Some (`Decrypted payload) ->
                    let out = Pool.copy t.pool payload in
                    Iovec.release v;
                    h.recv ~src out);
            closed = h.closed;
          }
    in
    match T.open_ t.inner addr wrap_handler with
    | Ok _ -> (
        match !self with
        | Some c -> Ok c
        | None -> Error (`System "seal: the transport made no connection"))
    | Error e -> Error e
end
