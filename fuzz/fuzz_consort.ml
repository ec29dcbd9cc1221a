(* Fuzz targets: every decoder on the network path, and whole stacks fed
   hostile datagrams. Run by scripts/fuzz.sh (a short random run in
   `make test`, AFL++ in `make fuzz`). Each target must never raise; codecs
   must also be canonical. *)

open Consort
module G = Consort_group
module N = Consort_net
open Targets

(* {1 Group layers and the side channel} *)

let () =
  codec_tagged "bottom" G.Bottom.codec [ G.Bottom.magic ];
  codec_tagged "pt2pt" G.Pt2pt.codec [ 0; 1; 2; 3 ];
  codec_tagged "mnak" G.Mnak.codec [ 0; 1; 2; 3; 4; 5 ];
  codec_tagged "frag" G.Frag.codec [ 0; 1; 2; 3 ];
  codec_tagged "pt2ptw" G.Pt2ptw.codec [ 0; 1; 2; 3; 4; 5 ];
  codec_tagged "mflow" G.Mflow.codec [ 0; 1; 2; 3; 4; 5 ];
  codec_tagged "suspect" G.Suspect.codec [ 0; 1; 2; 3 ];
  codec_tagged "slander" G.Slander.codec [ 0; 1; 2; 3 ];
  codec_tagged "gmp" G.Gmp.codec [ 0; 1; 2; 3; 4; 5; 6; 7 ];
  codec_tagged "total" G.Total.codec [ 0; 1; 2; 3; 4; 5; 6 ];
  codec_tagged "side" G.Side.codec [ G.Side.magic ];
  codec_tagged "migrate" G.Migrate.codec [ G.Migrate.magic ];
  codec_tagged "cltsvr" G.Cltsvr.wire_codec [ G.Group.client_magic ];
  codec_tagged "cltsvr-env" G.Cltsvr.env_codec [ G.Group.client_magic ];
  codec "chk_fifo" G.Chk.Fifo.codec;
  codec_tagged "chk_total" G.Chk.Total_chk.codec [ 0; 1 ];
  codec_tagged "chk_sync" G.Chk.Sync_chk.codec [ 0; 1; 2 ]

(* {2 A whole stack}

   Member 0 of a three-member view running every vsync layer, fed a
   sequence of datagrams: raw bytes, bytes behind a valid Bottom header
   from another member (so that the search reaches the layers above), and
   captured datagrams of a real exchange, mutated; the clock moves between
   them. Nothing may raise, and once the stack stops no buffer is held. *)

let layers = match G.Properties.layers G.Properties.vsync with Ok l -> l | Error _ -> assert false
let members = [| "m0"; "m1"; "m2" |]

type member = { st : Stack.t; pool : Pool.t; clock : Time.t ref }

(* The same with Total (sequencer) on top, on the fused path: member 1
   gets the sequencer's casts with their places, compressed, its orders,
   and member 2's casts. *)
let total_layers =
  lazy (match G.Properties.(layers (vsync @ [ Total ])) with Ok l -> l | Error _ -> assert false)

let member ?(layers = layers) ?(fused = false) ?(net = fun _ m -> Msg.release m)
    ?(deliver = fun _ m -> Msg.release m) rank =
  let pool = Pool.create () in
  let clock = ref 0 in
  let view = View.v ~group:"fuzz" ~members ~rank () in
  let ctx =
    { Layer.view; rng = Rng.create rank; params = Params.empty; pool; now = (fun () -> !clock) }
  in
  match Stack.create ~fused ctx layers ~net ~app:{ Stack.deliver; ctl = ignore } with
  | Ok st -> { st; pool; clock }
  | Error e -> failwith e

let advance m dt =
  let stop = !(m.clock) + dt in
  let rec go k =
    let a = Stack.next_alarm m.st in
    if a <= stop && k < 10_000 then begin
      m.clock := max !(m.clock) a;
      Stack.timer m.st !(m.clock);
      go (k + 1)
    end
  in
  go 0;
  m.clock := max !(m.clock) stop

let feed m s = Stack.recv m.st (Msg.of_iovec (Pool.of_string m.pool s))
let group_stamp = View.stamp (View.v ~group:"fuzz" ~members ~rank:0 ())

(* Datagrams that member 0 receives while the three members exchange
   casts and sends over a perfect network: the corpus the mutating target
   starts from. *)
let capture ?layers ?fused ?(at = 0) () =
  let got = ref [] in
  let queue = Queue.create () in
  let ms = Array.make 3 None in
  let get r = Option.get ms.(r) in
  for r = 0 to 2 do
    let net dst msg =
      let s = Msg.to_string msg in
      Msg.release msg;
      match dst with
      | Event.Cast -> List.iter (fun d -> if d <> r then Queue.push (d, s) queue) [ 0; 1; 2 ]
      | Event.Send d -> Queue.push (d, s) queue
    in
    ms.(r) <- Some (member ?layers ?fused ~net r)
  done;
  let pump () =
    while not (Queue.is_empty queue) do
      let d, s = Queue.pop queue in
      if d = at then got := s :: !got;
      feed (get d) s
    done
  in
  for i = 0 to 40 do
    let r = i mod 3 in
    let body = Msg.of_string (get r).pool (Printf.sprintf "cast %d from %d" i r) in
    if i mod 4 = 3 then Stack.send (get r).st ((r + 1) mod 3) body else Stack.cast (get r).st body;
    pump ();
    Array.iter (fun m -> advance (Option.get m) (Time.of_ms 30)) ms;
    pump ()
  done;
  Array.iter (fun m -> Stack.dn_ctl (Option.get m).st Event.Stop) ms;
  Array.of_list (List.rev !got)

let captured = lazy (capture ())
let captured_total = lazy (capture ~layers:(Lazy.force total_layers) ~fused:true ~at:1 ())

(* The default stack fused: casts and sends arrive compressed (kinds 0
   and 1 of the compressed header). *)
let captured_fused =
  lazy
    (let c = capture ~fused:true () in
     let kind k s = String.length s > 1 && s.[0] = '\xc8' && Char.code s.[1] = k in
     if not (Array.exists (kind 0) c && Array.exists (kind 1) c) then
       failwith "no compressed cast or send captured";
     c)

type input =
  | Raw of string
  | Framed of { origin : int; cast : bool; rest : string }
  | Mutated of { index : int; at : int; value : int; cut : int }
  | Tick of int

let input =
  Crowbar.(
    choose
      [
        map [ bytes ] (fun s -> Raw s);
        map [ range 4; bool; bytes ] (fun origin cast rest -> Framed { origin; cast; rest });
        (* Most mutations hit the headers with small values: tags, ranks,
           sequence numbers and lengths are where decisions are taken. *)
        map
          [ int; choose [ range 24; int ]; choose [ range 9; uint8 ]; int ]
          (fun index at value cut -> Mutated { index; at; value; cut });
        map [ range 2000 ] (fun ms -> Tick ms);
      ])

let bytes_of_input = function
  | Raw s -> Some s
  | Framed { origin; cast; rest } ->
      let h =
        if cast then G.Bottom.Cast { group = group_stamp; origin }
        else G.Bottom.Send { group = group_stamp; origin; dst = 0 }
      in
      Some (Codec.encode_string G.Bottom.codec h ^ rest)
  | Mutated { index; at; value; cut } ->
      let c = Lazy.force captured in
      if Array.length c = 0 then None
      else
        let s = Bytes.of_string c.(abs (index mod Array.length c)) in
        let n = Bytes.length s in
        if n > 0 then Bytes.set s (abs (at mod n)) (Char.chr value);
        let keep = if cut land 1 = 0 then n else abs (cut mod (n + 1)) in
        Some (Bytes.sub_string s 0 keep)
  | Tick _ -> None

let () =
  Crowbar.add_test ~name:"stack vsync"
    [ Crowbar.list input ]
    (fun inputs ->
      let m = member 0 in
      List.iter
        (fun i ->
          match (i, bytes_of_input i) with
          | Tick ms, _ -> advance m (Time.of_ms ms)
          | _, Some s -> feed m s
          | _, None -> ())
        inputs;
      advance m (Time.of_sec 2.);
      Stack.dn_ctl m.st Event.Stop;
      Crowbar.check_eq ~pp:Fmt.int 0 (Pool.in_use m.pool))

(* The captured exchange replayed into a fresh member 0 with some
   datagrams mutated: forgeries inserted before the real ones, or in their
   place. A mutation is the datagram's index, a byte position and value,
   a truncation, and whether it replaces the original. *)
type mutation = { index : int; at : int; value : int; cut : int; replace : bool }

let mutation =
  Crowbar.(
    map
      [ int; choose [ range 24; int ]; choose [ range 9; uint8 ]; int; bool ]
      (fun index at value cut replace -> { index; at; value; cut; replace }))

let mutate s { at; value; cut; _ } =
  let b = Bytes.of_string s in
  let n = Bytes.length b in
  if n > 0 then Bytes.set b (abs (at mod n)) (Char.chr value);
  let keep = if cut land 3 <> 0 then n else abs (cut mod (n + 1)) in
  Bytes.sub_string b 0 keep

let mutated ~name ~captured ~member =
  Crowbar.add_test ~name
    [ Crowbar.list mutation ]
    (fun muts ->
      let c = Lazy.force captured in
      let n = Array.length c in
      let m = member () in
      Array.iteri
        (fun i s ->
          let mine = List.filter (fun mu -> abs (mu.index mod n) = i) muts in
          List.iter (fun mu -> feed m (mutate s mu)) mine;
          if not (List.exists (fun mu -> mu.replace) mine) then feed m s;
          if i mod 8 = 7 then advance m (Time.of_ms 30))
        c;
      advance m (Time.of_sec 2.);
      Stack.dn_ctl m.st Event.Stop;
      Crowbar.check_eq ~pp:Fmt.int 0 (Pool.in_use m.pool))

let () =
  mutated ~name:"stack vsync, captured datagrams mutated" ~captured ~member:(fun () -> member 0);
  mutated ~name:"stack vsync+Total fused, captured datagrams mutated" ~captured:captured_total
    ~member:(fun () -> member ~layers:(Lazy.force total_layers) ~fused:true 1);
  mutated ~name:"stack vsync fused (compressed casts and sends), captured datagrams mutated"
    ~captured:captured_fused ~member:(fun () -> member ~fused:true 0)

(* {1 The TCP/IP stack's decoders} *)

let cs = Cstruct.of_string

let () =
  total "ethernet" (fun s -> N.Ethernet_packet.decode (cs s));
  total "arp" (fun s -> N.Arp_packet.decode (cs s));
  total "ipv4" (fun s -> N.Ipv4_packet.decode (cs s));
  total "ipv4 unverified" (fun s -> N.Ipv4_packet.decode ~verify:false (cs s));
  total "icmp" (fun s -> N.Icmp_packet.decode (cs s));
  total "udp" (fun s -> N.Udp_packet.decode (cs s));
  total "tcp" (fun s ->
      match N.Tcp_packet.decode (cs s) with
      | Error _ -> ()
      | Ok (p, _) ->
          ignore (N.Tcp_options.of_syn p.N.Tcp_packet.options);
          ignore (N.Tcp_options.timestamp p.options);
          ignore (N.Tcp_options.sack p.options));
  total "ipv4 address" N.Ipv4_addr.of_string;
  total "ipv6 address" N.Ipv6_addr.of_string;
  total "mac address" N.Mac_addr.of_string

(* {1 Sealed datagrams}

   Bytes at a sealed connection: nothing raises, and nothing is handed up
   (no input can carry a valid tag). *)

module Sim = Consort_engine.Sim
module Sealed = Consort_seal.Seal.Make (Sim)

(* With per-view keys, and a view key installed, so that bytes under its
   id reach the AEAD. *)
let sealed_receiver =
  lazy
    (let net = Sim.create () in
     let secret = Result.get_ok (Consort_seal.Seal.secret_of_string (String.make 32 's')) in
     let got = ref 0 in
     let t = Sealed.wrap ~rekey:true net (Some (secret, Consort_seal.Seal.Privacy)) in
     (match Sealed.rekey t with
     | Some r -> (snd (r.Consort_group.Group.draw ~vid:"1:b" ~me:"b" ~context:"" [])) ()
     | None -> ());
     let _ =
       Sealed.open_ t "b" (fun _ ->
           {
             Sealed.recv =
               (fun ~src:_ v ->
                 incr got;
                 Iovec.release v);
             closed = ignore;
           })
     in
     let x =
       Result.get_ok
         (Sim.open_ net "x" (fun _ ->
              { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }))
     in
     (* The view key's id, as a datagram under it carries it. *)
     let kid =
       match Sealed.held t with
       | Some h -> (
           match
             Consort_seal.Seal.seal_held h ~under:`View ~id:(String.make 16 'i') ~counter:1L
               ~wall_ms:0L "\xc1"
           with
           | Some d -> String.sub d 34 8
           | None -> "")
       | None -> ""
     in
     (net, x, got, kid, t))

let () =
  let prefix =
    Crowbar.choose
      [
        Crowbar.const "";
        Crowbar.const "\xc5\x01";
        Crowbar.const "\xc5\x02";
        Crowbar.const "\xc5\x03";
        Crowbar.const "\xc5\x04";
        Crowbar.map
          [ Crowbar.bytes_fixed 32 ]
          (fun h ->
            let _, _, _, kid, _ = Lazy.force sealed_receiver in
            "\xc5\x04" ^ h ^ kid);
      ]
  in
  Crowbar.add_test ~name:"sealed datagram" [ prefix; Crowbar.bytes ] (fun p s ->
      let net, x, got, _, _ = Lazy.force sealed_receiver in
      let before = !got in
      let m = Msg.of_string Pool.default (p ^ s) in
      ignore (Sim.send x ~dst:"b" m);
      Msg.release m;
      Sim.run net;
      Crowbar.check_eq ~pp:Fmt.int before !got);
  (* A wrapped view key from anyone: never raises, never opens. *)
  Crowbar.add_test ~name:"rekey unwrap" [ Crowbar.bytes; Crowbar.bytes; Crowbar.bytes ]
    (fun maker_pub wrapped context ->
      let _, _, _, _, t = Lazy.force sealed_receiver in
      match Sealed.rekey t with
      | Some r ->
          Crowbar.check
            (r.Consort_group.Group.unwrap ~vid:"2:a" ~me:"b" ~context ~installer:("a", maker_pub)
               wrapped
            = None)
      | None -> Crowbar.fail "no keys")

(* {2 Bundles}

   Any bytes behind a bundle's header: the unbundler either drops them
   whole (counted) or hands up datagrams that are exactly the pieces the
   format says, never raises, and keeps no buffer. And a list of datagrams
   bundled by [Wire.encode] comes back the same. *)

module Bundled = G.Bundle.Make (Sim)

let () =
  let pool = Pool.create ~name:"fuzz-bundle" () in
  let head =
    Crowbar.map [ Crowbar.uint8; Crowbar.uint8 ] (fun a b ->
        Printf.sprintf "%c\001%c%c" (Char.chr G.Bundle.Wire.magic)
          (Char.chr (a land 1))
          (Char.chr b))
  in
  Crowbar.add_test ~name:"bundle" [ head; Crowbar.bytes ] (fun h s ->
      let input = h ^ s in
      let net = Sim.create ~pool () in
      let got = ref [] in
      let b =
        match
          Bundled.open_ net "b" (fun _ ->
              {
                Bundled.recv =
                  (fun ~src:_ v ->
                    got := Iovec.to_string v :: !got;
                    Iovec.release v);
                closed = ignore;
              })
        with
        | Ok c -> c
        | Error _ -> Crowbar.fail "open"
      in
      let x =
        match
          Sim.open_ net "x" (fun _ ->
              { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore })
        with
        | Ok c -> c
        | Error _ -> Crowbar.fail "open"
      in
      let m = Msg.of_string Pool.default input in
      ignore (Sim.send x ~dst:"b" m);
      Msg.release m;
      Sim.run net;
      (match G.Bundle.Wire.decode input with
      | Ok ds ->
          Crowbar.check_eq ~pp:Fmt.(Dump.list string) ds (List.rev !got);
          Crowbar.check_eq ~pp:Fmt.int 0 (Bundled.stats b).malformed
      | Error _ ->
          Crowbar.check_eq ~pp:Fmt.(Dump.list string) [] !got;
          Crowbar.check_eq ~pp:Fmt.int 1 (Bundled.stats b).malformed);
      Bundled.close b;
      Sim.close x;
      Crowbar.check_eq ~pp:Fmt.int 0 (Pool.in_use pool));
  Crowbar.add_test ~name:"bundle round trip"
    [ Crowbar.list1 Crowbar.bytes ]
    (fun ds ->
      let ds = List.filter (fun d -> d <> "" && String.length d < 65536) ds in
      if ds <> [] && List.length ds <= G.Bundle.Wire.max_count then
        Crowbar.check_eq
          ~pp:Fmt.(Dump.result ~ok:(Dump.list string) ~error:string)
          (Ok ds)
          (G.Bundle.Wire.decode (G.Bundle.Wire.encode ds)))

(* {2 A sealed group, its captured datagrams mutated}

   Two members with Privacy and per-view keys exchange casts in the
   simulator; member b's incoming datagrams are captured; then a stops
   (crashes, never suspected: the timeouts are long), and b, still in the
   view and holding its key, is fed captured datagrams mutated (a byte set,
   a truncation) or as they were: none is ever handed up (each is altered,
   or a replay), nothing is delivered, nothing raises. *)

module SG = Consort_group.Group.Make (Consort_seal.Seal.Make (Sim))

let sealed_group =
  lazy
    (let net = Sim.create ~seed:9 () in
     let secret = Result.get_ok (Consort_seal.Seal.secret_of_string (String.make 32 'g')) in
     let params =
       match
         Params.of_string "suspect.timeout=1000s,suspect.verify=100s,gmp.flush_timeout=1000s"
       with
       | Ok p -> p
       | Error _ -> Params.empty
     in
     let delivered = ref 0 in
     let join addr =
       let t =
         Sealed.wrap ~rekey:true
           ~g:(Consort_crypto.Crypto.deterministic ("fuzz-" ^ addr))
           ~wall:(fun () -> 1_700_000_000. +. Time.to_sec (Sim.now net))
           net
           (Some (secret, Consort_seal.Seal.Privacy))
       in
       let cb =
         {
           Consort_group.Group.view = ignore;
           cast = (fun ~origin:_ _ -> if addr = "b" then incr delivered);
           send = (fun ~origin:_ _ -> if addr = "b" then incr delivered);
           block = ignore;
           flow = ignore;
           exit = ignore;
         }
       in
       match
         SG.join ~params ~peers:[ "a"; "b" ] ~seed:(Hashtbl.hash addr) ?rekey:(Sealed.rekey t)
           ~layers t ~group:"fuzz" ~addr cb
       with
       | Ok g -> g
       | Error _ -> failwith "sealed group: join"
     in
     let a = join "a" and b = join "b" in
     let got = ref [] in
     ignore
       (Sealed.control (SG.connection b)
          (Sealed.Drop_filter
             (Some
                (fun ~src:_ cs ->
                  got := Cstruct.to_string cs :: !got;
                  false))));
     Sim.run ~until:(Time.of_sec 5.) net;
     for i = 1 to 30 do
       ignore (SG.cast a (Printf.sprintf "cast %d from a" i));
       ignore (SG.cast b (Printf.sprintf "cast %d from b" i));
       Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 20)) net
     done;
     Sim.run ~until:(Time.add (Sim.now net) (Time.of_sec 1.)) net;
     Sim.crash net "a";
     let x =
       Result.get_ok
         (Sim.open_ net "x" (fun _ ->
              { Sim.recv = (fun ~src:_ v -> Iovec.release v); closed = ignore }))
     in
     (net, b, x, Array.of_list (List.rev !got), delivered))

let () =
  let mutation =
    Crowbar.(
      map
        [ int; choose [ range 64; int ]; choose [ range 9; uint8 ]; int; bool ]
        (fun index at value cut keep -> (index, at, value, cut, keep)))
  in
  Crowbar.add_test ~name:"sealed group, captured datagrams mutated"
    [ Crowbar.list mutation ]
    (fun muts ->
      let net, b, x, c, delivered = Lazy.force sealed_group in
      if Array.length c < 20 then Crowbar.fail "too few datagrams captured";
      let before = (Sealed.stats (SG.connection b)).opened and got = !delivered in
      List.iter
        (fun (index, at, value, cut, keep) ->
          let s = Bytes.of_string c.(abs (index mod Array.length c)) in
          let n = Bytes.length s in
          if (not keep) && n > 0 then Bytes.set s (abs (at mod n)) (Char.chr value);
          let len = if cut land 1 = 0 then n else abs (cut mod (n + 1)) in
          let m = Msg.of_string Pool.default (Bytes.sub_string s 0 len) in
          ignore (Sim.send x ~dst:"b" m);
          Msg.release m)
        muts;
      Sim.run ~until:(Time.add (Sim.now net) (Time.of_ms 5)) net;
      Crowbar.check_eq ~pp:Fmt.int before (Sealed.stats (SG.connection b)).opened;
      Crowbar.check_eq ~pp:Fmt.int got !delivered)

(* {1 Capability services} *)

let () =
  codec "rpc outer" Consort_cap.Wire.outer;
  codec "rpc inner" Consort_cap.Wire.inner;
  codec "rpc header" Consort_cap.Header.codec;
  codec "rpc status" Consort_cap.Status.codec;
  codec "capability" Consort_cap.Cap.codec;
  codec "port" Consort_cap.Port.codec;
  total "capability text" Consort_cap.Cap.of_string;
  total "capability raw" Consort_cap.Cap.of_raw;
  total "rights text" Consort_cap.Rights.of_string;
  total "params" Params.of_string;
  total "properties" G.Properties.of_string

(* {1 The directory server} *)

let () =
  codec "capdir request" Consort_capdir.Dir_server.request_codec;
  codec_tagged "capdir outcome" Consort_capdir.Dir_server.outcome_codec [ 0; 1; 2 ]

(* {1 consortd} *)

let () = Daemon_fuzz.register ()
let () = Cap_services_fuzz.register ()
