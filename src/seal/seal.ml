open Consort
module Crypto = Consort_cap.Crypto
module Aead = Mirage_crypto.Chacha20

let src = Logs.Src.create "consort.seal" ~doc:"Sealed datagrams"

module Log = (val Logs.src_log src : Logs.LOG)

type mode = Auth | Privacy

let pp_mode ppf = function Auth -> Fmt.string ppf "Auth" | Privacy -> Fmt.string ppf "Privacy"
let mode_byte = function Auth -> 1 | Privacy -> 2

type secret = string

let secret_length = 32

let secret_of_string s =
  if String.length s = secret_length then Ok s
  else Error (Printf.sprintf "a group secret is %d bytes, not %d" secret_length (String.length s))

let pp_secret ppf s = Fmt.pf ppf "secret:%s" (String.sub (Crypto.to_hex (Crypto.sha256 [ "consort-key-id-v1"; s ])) 0 8)
let generate () = Crypto.random secret_length
let key_prefix = "consort-key-v1:"

let write_key path s =
  match Unix.openfile path [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_EXCL; Unix.O_CLOEXEC ] 0o600 with
  | exception Unix.Unix_error (Unix.EEXIST, _, _) -> Error (path ^ ": already exists (a key is never overwritten)")
  | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
  | fd ->
      Fun.protect
        ~finally:(fun () -> Unix.close fd)
        (fun () ->
          let line = key_prefix ^ Base64.encode_string ~pad:false ~alphabet:Base64.uri_safe_alphabet s ^ "\n" in
          match
            Unix.fchmod fd 0o600;
            ignore (Unix.write_substring fd line 0 (String.length line));
            Unix.fsync fd
          with
          | () -> Ok ()
          | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: %s" path (Unix.error_message e)))

let read_key path =
  match Unix.stat path with
  | exception Unix.Unix_error (e, _, _) -> Error (Printf.sprintf "%s: %s" path (Unix.error_message e))
  | st when st.Unix.st_kind <> Unix.S_REG -> Error (path ^ ": not a regular file")
  | st when st.Unix.st_perm land 0o077 <> 0 ->
      Error (Printf.sprintf "%s: mode %o lets others read or write the key; chmod 600 it" path st.Unix.st_perm)
  | st when st.Unix.st_size > 4096 -> Error (path ^ ": too large for a key file")
  | _ -> (
      match open_in_bin path with
      | exception Sys_error e -> Error e
      | ic -> (
          let s = Fun.protect ~finally:(fun () -> close_in ic) (fun () -> really_input_string ic (in_channel_length ic)) in
          let s = String.trim s in
          let n = String.length key_prefix in
          if String.length s < n || String.sub s 0 n <> key_prefix then
            Error (path ^ ": not a Consort key file (consort keygen writes one)")
          else
            match Base64.decode ~pad:false ~alphabet:Base64.uri_safe_alphabet (String.sub s n (String.length s - n)) with
            | Error _ -> Error (path ^ ": the key is not valid base64url")
            | Ok k -> (
                match secret_of_string k with Ok k -> Ok k | Error e -> Error (path ^ ": " ^ e))))

type stats = {
  sealed : int;
  opened : int;
  malformed : int;
  clear : int;
  bad_tag : int;
  wrong_mode : int;
  replayed : int;
  stale : int;
}

let pp_stats ppf s =
  Fmt.pf ppf "sealed=%d opened=%d malformed=%d clear=%d bad_tag=%d wrong_mode=%d replayed=%d stale=%d" s.sealed
    s.opened s.malformed s.clear s.bad_tag s.wrong_mode s.replayed s.stale

let magic = 0xC5
let header_length = 34
let tag_length = 16

(* Privacy encrypts a marker byte before the payload, so that the AEAD
   never sees an empty plaintext. *)
let overhead = header_length + 1 + tag_length
let id_length = 16
let window = 1024
let max_senders = 4096

(* The key a sender seals under: its own, so nonces never repeat across
   senders. *)
type keys = { aead : Aead.key }

let sender_key secret id = { aead = Aead.of_secret (Cstruct.of_string (Crypto.hmac ~key:secret [ "consort-seal-v1"; id ])) }

(* The marker byte both modes encrypt: with Privacy before the payload,
   with Auth alone (the header and the payload are then associated data),
   so that the AEAD never sees an empty plaintext. *)
let marker = Cstruct.of_string "\000"

let nonce counter =
  let n = Cstruct.create 12 in
  Cstruct.BE.set_uint64 n 4 counter;
  n

(* What a receiver remembers of a sender: its key, the highest counter
   seen and which of the [window] counters below it arrived. *)
type peer = { key : keys; mutable top : int64; seen : Bytes.t (* window bits *) }

let bit_index c = Int64.to_int (Int64.rem c (Int64.of_int window))
let get_bit b i = Char.code (Bytes.get b (i lsr 3)) land (1 lsl (i land 7)) <> 0

let set_bit b i v =
  let c = Char.code (Bytes.get b (i lsr 3)) in
  Bytes.set b (i lsr 3) (Char.chr (if v then c lor (1 lsl (i land 7)) else c land lnot (1 lsl (i land 7))))

(* Accepts [c] once: false for a counter seen, or too old to tell. *)
let accept_counter p c =
  if Int64.compare c p.top > 0 then begin
    (* Clear the bits of the counters skipped over, then mark [c]. *)
    let gap = Int64.sub c p.top in
    if Int64.compare gap (Int64.of_int window) >= 0 then Bytes.fill p.seen 0 (Bytes.length p.seen) '\000'
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

module Ids = Consort_net.Lru.Make (struct
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

  type t = { inner : T.t; seal : (secret * mode) option; freshness : Time.t; wall : unit -> float; pool : Pool.t }

  let wrap ?(freshness = Time.of_sec 60.) ?(wall = Unix.gettimeofday) inner seal =
    { inner; seal; freshness; wall; pool = Pool.create ~name:"seal" () }

  let inner t = t.inner

  type counts = {
    mutable sealed : int;
    mutable opened : int;
    mutable malformed : int;
    mutable clear : int;
    mutable bad_tag : int;
    mutable wrong_mode : int;
    mutable replayed : int;
    mutable stale : int;
  }

  type connection = {
    c : T.connection;
    t : t;
    id : string;
    key : keys option;  (* this sender's *)
    mutable counter : int64;
    peers : peer Ids.t;
    n : counts;
  }

  type handler = T.handler = { recv : src:address -> Iovec.t -> unit; closed : unit -> unit }
  type nonrec control = T.control = Drop_filter of (src:address -> Cstruct.t -> bool) option | Join_multicast of address

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
  let at t = T.at t.inner
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
    }

  let senders c = Ids.length c.peers
  let wall_ms t = Int64.of_float (t.wall () *. 1000.)

  (* The sealed form of [msg]'s bytes, written into one buffer: the header,
     then the payload (with Privacy, after the marker), then the tag. *)
  let seal_msg c secret_mode msg =
    let _, mode = secret_mode in
    let key = (Option.get c.key).aead in
    c.counter <- Int64.succ c.counter;
    let len = Msg.length msg in
    let v = Pool.alloc c.t.pool (len + overhead) in
    let cs = Iovec.cstruct v in
    Cstruct.set_uint8 cs 0 magic;
    Cstruct.set_uint8 cs 1 (mode_byte mode);
    Cstruct.blit_from_string c.id 0 cs 2 id_length;
    Cstruct.BE.set_uint64 cs 18 c.counter;
    Cstruct.BE.set_uint64 cs 26 (wall_ms c.t);
    let nonce = nonce c.counter in
    (match mode with
    | Privacy ->
        Cstruct.set_uint8 cs header_length 0;
        ignore (Msg.blit_to msg cs (header_length + 1));
        let sealed =
          Aead.authenticate_encrypt ~key ~nonce ~adata:(Cstruct.sub cs 0 header_length)
            (Cstruct.sub cs header_length (len + 1))
        in
        Cstruct.blit sealed 0 cs header_length (Cstruct.length sealed)
    | Auth ->
        ignore (Msg.blit_to msg cs header_length);
        let tag = Aead.authenticate_encrypt ~key ~nonce ~adata:(Cstruct.sub cs 0 (header_length + len)) marker in
        Cstruct.blit tag 0 cs (header_length + len) (Cstruct.length tag));
    c.n.sealed <- c.n.sealed + 1;
    Msg.of_iovec v

  let with_sealed c msg f =
    match c.t.seal with
    | None -> f msg
    | Some sm ->
        let m = seal_msg c sm msg in
        Fun.protect ~finally:(fun () -> Msg.release m) (fun () -> f m)

  let send c ~dst msg = with_sealed c msg (fun m -> T.send c.c ~dst m)
  let cast c ~dsts msg = with_sealed c msg (fun m -> T.cast c.c ~dsts m)
  let close c = T.close c.c
  let control c = T.control c.c

  let query c =
    let i = T.query c.c in
    match c.t.seal with None -> i | Some _ -> { i with mtu = i.mtu - overhead }

  (* Where the payload of a received datagram is, or [None] (counted):
     [`In_place (off, len)] (Auth: the datagram's own bytes) or
     [`Decrypted cs] (Privacy). *)
  let unseal c (secret, mode) cs =
    let n = c.n in
    let len = Cstruct.length cs in
    if len = 0 || Cstruct.get_uint8 cs 0 <> magic then begin
      n.clear <- n.clear + 1;
      None
    end
    else if len < overhead then begin
      n.malformed <- n.malformed + 1;
      None
    end
    else
      let m = Cstruct.get_uint8 cs 1 in
      if m <> 1 && m <> 2 then begin
        n.malformed <- n.malformed + 1;
        None
      end
      else
        let id = Cstruct.to_string ~off:2 ~len:id_length cs in
        let counter = Cstruct.BE.get_uint64 cs 18 in
        let sent_at = Cstruct.BE.get_uint64 cs 26 in
        let known = Ids.find c.peers id in
        let key = match known with Some p -> p.key | None -> sender_key secret id in
        let nonce = nonce counter in
        let opened =
          if m = 2 then
            match
              Aead.authenticate_decrypt ~key:key.aead ~nonce ~adata:(Cstruct.sub cs 0 header_length)
                (Cstruct.sub cs header_length (len - header_length))
            with
            | Some plain when Cstruct.length plain >= 1 && Cstruct.get_uint8 plain 0 = 0 -> Some (`Decrypted (Cstruct.shift plain 1))
            | Some _ | None -> None
          else
            let plen = len - overhead in
            match
              Aead.authenticate_decrypt ~key:key.aead ~nonce ~adata:(Cstruct.sub cs 0 (header_length + plen))
                (Cstruct.sub cs (header_length + plen) (1 + tag_length))
            with
            | Some plain when Cstruct.length plain = 1 && Cstruct.get_uint8 plain 0 = 0 -> Some (`In_place (header_length, plen))
            | Some _ | None -> None
        in
        match opened with
        | None ->
            n.bad_tag <- n.bad_tag + 1;
            None
        | Some payload ->
            if m <> mode_byte mode then begin
              n.wrong_mode <- n.wrong_mode + 1;
              None
            end
            else
              let skew = Int64.abs (Int64.sub (wall_ms c.t) sent_at) in
              if Int64.compare skew (Int64.of_int (c.t.freshness / 1_000_000)) > 0 then begin
                n.stale <- n.stale + 1;
                None
              end
              else
                let p =
                  match known with
                  | Some p -> p
                  | None ->
                      let p = { key; top = 0L; seen = Bytes.make (window / 8) '\000' } in
                      Ids.add c.peers id p;
                      p
                in
                if id = c.id || not (accept_counter p counter) then begin
                  n.replayed <- n.replayed + 1;
                  None
                end
                else begin
                  n.opened <- n.opened + 1;
                  Some payload
                end

  let open_ t addr f =
    let self = ref None in
    let id = Crypto.random id_length in
    let key = Option.map (fun (s, _) -> sender_key s id) t.seal in
    let peers = Ids.create max_senders in
    let n =
      { sealed = 0; opened = 0; malformed = 0; clear = 0; bad_tag = 0; wrong_mode = 0; replayed = 0; stale = 0 }
    in
    let wrap_handler tc =
      let c = { c = tc; t; id; key; counter = 0L; peers; n } in
      self := Some c;
      let h = f c in
      match t.seal with
      | None -> h
      | Some sm ->
          {
            T.recv =
              (fun ~src v ->
                let opened = unseal c sm (Iovec.cstruct v) in
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
    | Ok _ -> ( match !self with Some c -> Ok c | None -> Error (`System "seal: the transport made no connection"))
    | Error e -> Error e
end
