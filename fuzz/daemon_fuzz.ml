(* Fuzz targets for consortd: its request decoder and framer (total and
   canonical), the clients' event decoder, and whole client sessions
   against a daemon: any bytes, valid frames of every kind (JOIN that
   makes a real member included) mixed with garbage, must neither raise
   in the daemon nor leave a client or member behind once the connection
   closes. *)

module Wire = Consort_daemon.Wire
module Server = Consort_daemon.Server
module Loop = Consort_engine.Loop

let pp_s ppf s = Fmt.pf ppf "%S" s

let canonical name decode encode =
  Crowbar.add_test ~name [ Crowbar.bytes ] (fun s ->
      match decode s with
      | Error _ -> ()
      | Ok v ->
          let f = encode v in
          Crowbar.check_eq ~pp:pp_s s (String.sub f 4 (String.length f - 4)))

let framer () =
  Crowbar.add_test ~name:"daemon framer"
    [ Crowbar.list Crowbar.bytes; Crowbar.range 1000 ]
    (fun chunks max ->
      let f = Wire.framer ~max:(max + 1) in
      let rec drain () =
        match Wire.next f with
        | `Frame s ->
            Crowbar.check (String.length s <= max + 1);
            drain ()
        | `Too_big n ->
            Crowbar.check (n > max + 1);
            ignore (Wire.skip f (4 + n))
        | `Empty_frame -> ignore (Wire.skip f 4)
        | `Need -> ()
      in
      List.iter
        (fun c ->
          Wire.feed f (Bytes.of_string c) 0 (String.length c);
          drain ())
        chunks)

(* {1 Sessions} *)

let str = Crowbar.(choose [ bytes; const ""; const "g" ])

let props =
  Crowbar.(
    choose
      [
        const "";
        const "vsync";
        const "vsync,Total";
        const "Gmp,Sync";
        const "Nonsense";
        const "vsync,Auth";
        bytes;
      ])

let params =
  Crowbar.(choose [ const ""; const "suspect.timeout=2s"; const "mflow.window=0"; bytes ])

let peers =
  Crowbar.(list (choose [ const "127.0.0.1:30500"; const "127.0.0.1:1-65535"; const "x"; bytes ]))

let handle =
  Crowbar.(
    choose
      [ range 4; const Wire.no_handle; map [ int32 ] (fun i -> Int32.to_int i land 0xffffffff) ])

let request =
  Crowbar.(
    choose
      [
        map
          [ range 3; range 3; str; choose [ const ""; str ] ]
          (fun min_version max_version name token ->
            Wire.Hello { min_version; max_version; name; token });
        map
          [ handle; str; props; params; range 4; peers ]
          (fun handle group props params flags peers ->
            Wire.Join { handle; group; props; params; flags; peers });
        map [ handle ] (fun handle -> Wire.Leave { handle });
        map
          [ handle; range 10; bytes ]
          (fun handle req payload -> Wire.Cast { handle; req; payload });
        map
          [ handle; range 10; str; bytes ]
          (fun handle req dst payload -> Wire.Send { handle; req; dst; payload });
        map [ handle; list str ] (fun handle ids -> Wire.Suspect { handle; ids });
        map [ handle ] (fun handle -> Wire.Block_ok { handle });
        map [ handle; props; params ] (fun handle props params ->
            Wire.Switch { handle; props; params });
        map [ range 100 ] (fun cookie -> Wire.Ping { cookie });
      ])

let piece =
  Crowbar.(
    choose
      [
        map [ request ] Wire.encode_request;
        map [ request ] Wire.encode_request;
        bytes;
        (* A length prefix, honest or not, and what follows. *)
        map [ int32; bytes ] (fun n b ->
            let s = Bytes.create 4 in
            Bytes.set_int32_be s 0 n;
            Bytes.to_string s ^ b);
      ])

let hello =
  Wire.encode_request (Wire.Hello { min_version = 1; max_version = 1; name = "fuzz"; token = "" })

let daemon =
  lazy
    (let loop = Loop.create () in
     match
       Server.create loop
         {
           Server.default with
           socket = None;
           tcp = Some "127.0.0.1:0";
           bind = "127.0.0.1:30500";
           ports = 4;
           max_frame = 4096;
           max_queue = 65536;
         }
     with
     | Ok t -> (loop, t)
     | Error e -> failwith e)

let write_all loop fd s =
  let rec go off =
    if off < String.length s then
      match Unix.single_write_substring fd s off (String.length s - off) with
      | n -> go (off + n)
      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK), _, _) ->
          Loop.run loop ~timeout:(Consort.Time.of_ms 1);
          go off
      | exception Unix.Unix_error _ -> ()
  in
  go 0

let session () =
  Crowbar.add_test ~name:"daemon session"
    [ Crowbar.bool; Crowbar.list piece ]
    (fun say_hello pieces ->
      let loop, t = Lazy.force daemon in
      let errors = Loop.errors loop in
      let mine, theirs = Unix.socketpair ~cloexec:true Unix.PF_UNIX Unix.SOCK_STREAM 0 in
      Unix.set_nonblock mine;
      Server.adopt t theirs;
      write_all loop mine ((if say_hello then hello else "") ^ String.concat "" pieces);
      (* The end of the client's input: the daemon serves what it sent, then
         fails it out; its members leave, and nothing stays. *)
      (try Unix.shutdown mine Unix.SHUTDOWN_SEND with Unix.Unix_error _ -> ());
      Loop.run loop
        ~until:(fun () -> Server.clients t = 0 && Server.members t = 0)
        ~timeout:(Consort.Time.of_ms 10_000);
      Unix.close mine;
      Crowbar.check_eq ~pp:Fmt.int errors (Loop.errors loop);
      Crowbar.check_eq ~pp:Fmt.int 0 (Server.clients t);
      Crowbar.check_eq ~pp:Fmt.int 0 (Server.members t))

let register () =
  Sys.set_signal Sys.sigpipe Sys.Signal_ignore;
  canonical "daemon request" Wire.decode_request Wire.encode_request;
  canonical "daemon event" Wire.decode_event Wire.encode_event;
  framer ();
  session ()
