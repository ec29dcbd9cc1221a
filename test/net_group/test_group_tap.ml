(* A group over our own UDP/IPv4/Ethernet over TAP, with a member over
   kernel UDP: two stacks of ours, each on its own TAP device, and the
   kernel's side of both in a bridge in a network namespace that the test
   makes and removes; a third member is [consort member] (kernel sockets)
   run in that namespace. All three must form one view and exchange
   casts: the same wire format on both kinds of transport. *)

open Consort
open Consort_net
module Loop = Consort_engine.Loop
module Up = Consort_net_unix.Up
module U = Udp_transport
module G = Consort_group.Group.Make (Udp_transport)

(* A cast the group refuses fails the test. *)
let accepted = function
  | Ok () -> ()
  | Error e -> Alcotest.failf "cast refused: %a" Consort_group.Group.pp_error e

let kernel_ip = "10.79.0.1"
let ip_a = "10.79.0.2"
let ip_b = "10.79.0.3"
let port = 7400
let at ip = Printf.sprintf "%s:%d" ip port

let require_root () =
  if Unix.geteuid () <> 0 then
    Alcotest.fail
      "this test needs root (to open /dev/net/tun and create a network namespace); run it as root";
  if not (Sys.file_exists "/dev/net/tun") then Alcotest.fail "/dev/net/tun is missing"

open Net_test_util.Shell

let starts_with s p = String.length s >= String.length p && String.sub s 0 (String.length p) = p

let layers () =
  match Consort_group.Properties.(layers vsync) with
  | Ok l -> l
  | Error e -> Alcotest.failf "%a" Consort_group.Properties.pp_error e

type member = {
  g : G.t;
  casts : (string * string) list ref; (* origin, payload; newest first *)
  exited : bool ref;
}

let join tr addr ~pool ~peers ~seed =
  let casts = ref [] and exited = ref false in
  let cb =
    {
      Consort_group.Group.view =
        (fun v -> Logs.info (fun m -> m "%s: %a" addr Consort_group.Group.pp_view_info v));
      cast = (fun ~origin s -> casts := (origin, s) :: !casts);
      send = (fun ~origin:_ _ -> ());
      block = ignore;
      flow = ignore;
      exit = (fun () -> exited := true);
    }
  in
  match G.join ~pool ~peers ~seed ~layers:(layers ()) tr ~group:"tap" ~addr cb with
  | Ok g -> { g; casts; exited }
  | Error e -> Alcotest.failf "%s could not join: %a" addr Consort_group.Group.pp_join_error e

let view_members m = Array.to_list (G.view m.g).members

let one_view ms n =
  match ms with
  | [] -> false
  | m :: _ ->
      let v = G.view m.g in
      Array.length v.members = n
      && List.for_all (fun m' -> (G.view m'.g).vid = v.vid && not (G.is_blocked m'.g)) ms

let group_over_tap () =
  require_root ();
  let exe = consort_exe () in
  let id = Printf.sprintf "%d" (Unix.getpid () mod 100_000) in
  let ns = "consort-group-" ^ id
  and br = "cgbr" ^ id
  and tap_a = "cga" ^ id
  and tap_b = "cgb" ^ id in
  let loop = Loop.create () in
  let start tap ip mac =
    match Up.start ~loop ~mac ~udp_echo:[] ~udp_discard:[] ~tap ~ip:(ip ^ "/24") () with
    | Ok up -> up
    | Error (`Msg m) -> Alcotest.failf "starting a stack on TAP %s: %s" tap m
  in
  let up_a = start tap_a ip_a "02:00:0a:4f:00:02" in
  let ups = ref [ up_a ] in
  let out = Filename.temp_file "consort-group" ".member" in
  let pid = ref None in
  Fun.protect ~finally:(fun () ->
      (match !pid with
      | Some p -> (
          try
            Unix.kill p Sys.sigkill;
            ignore (Unix.waitpid [] p)
          with Unix.Unix_error _ -> ())
      | None -> ());
      List.iter Up.stop !ups;
      (try Sys.remove out with Sys_error _ -> ());
      ignore (quiet ("ip netns del " ^ ns));
      List.iter (fun d -> ignore (quiet ("ip link del " ^ d))) [ tap_a; tap_b ])
  @@ fun () ->
  let up_b = start tap_b ip_b "02:00:0a:4f:00:03" in
  ups := [ up_a; up_b ];
  must ("ip netns add " ^ ns);
  ignore (quiet (Printf.sprintf "ip netns exec %s sysctl -qw net.ipv6.conf.all.disable_ipv6=1" ns));
  must (Printf.sprintf "ip -n %s link add %s type bridge" ns br);
  List.iter
    (fun tap ->
      must (Printf.sprintf "ip link set %s netns %s" tap ns);
      must (Printf.sprintf "ip -n %s link set %s master %s" ns tap br);
      must (Printf.sprintf "ip -n %s link set %s up" ns tap))
    [ tap_a; tap_b ];
  must (Printf.sprintf "ip -n %s addr add %s/24 dev %s" ns kernel_ip br);
  must (Printf.sprintf "ip -n %s link set %s up" ns br);
  must (Printf.sprintf "ip -n %s link set lo up" ns);
  let peers = [ at kernel_ip; at ip_a; at ip_b ] in
  (* The member over kernel UDP: it casts each line we write to it and
     leaves at the end of its input. *)
  let rd, wr = Unix.pipe ~cloexec:true () in
  let fd = Unix.openfile out [ O_WRONLY; O_TRUNC ] 0o600 in
  let argv =
    [|
      "ip";
      "netns";
      "exec";
      ns;
      exe;
      "member";
      "--group";
      "tap";
      "--bind";
      at kernel_ip;
      "--peers";
      String.concat "," peers;
      "--seed";
      "7";
    |]
  in
  let t0 = Unix.gettimeofday () in
  pid := Some (Unix.create_process "ip" argv rd fd fd);
  Unix.close rd;
  Unix.close fd;
  let gpool = Pool.create ~name:"group" () in
  let a = join (U.create up_a.stack) (at ip_a) ~pool:gpool ~peers ~seed:1 in
  let b = join (U.create up_b.stack) (at ip_b) ~pool:gpool ~peers ~seed:2 in
  let ours = [ a; b ] in
  let run_until ?(timeout = 15.) what cond =
    Loop.run ~until:cond ~timeout:(Time.of_sec timeout) loop;
    if not (cond ()) then
      Alcotest.failf "%s: not within %.0f s; member over kernel UDP said:\n%s" what timeout
        (read_file out)
  in
  run_until "one view of three" (fun () -> one_view ours 3);
  let formed = Unix.gettimeofday () -. t0 in
  let kernel_id =
    match List.find_opt (fun id -> starts_with id (at kernel_ip ^ "#")) (view_members a) with
    | Some id -> id
    | None ->
        Alcotest.failf "the member over kernel UDP is not in the view: %s"
          (String.concat " " (view_members a))
  in
  Alcotest.(check (list string)) "both see the same members" (view_members a) (view_members b);
  (* A cast from each of the three. *)
  let t1 = Unix.gettimeofday () in
  accepted (G.cast a.g "from A over our stack");
  accepted (G.cast b.g "from B over our stack");
  let line = "from the kernel member\n" in
  ignore (Unix.write_substring wr line 0 (String.length line) : int);
  run_until "three casts at our members" (fun () ->
      List.for_all (fun m -> List.length !(m.casts) = 3) ours);
  let delivered = Unix.gettimeofday () -. t1 in
  let expected =
    List.sort compare
      [
        (G.me a.g, "from A over our stack");
        (G.me b.g, "from B over our stack");
        (kernel_id, "from the kernel member");
      ]
  in
  List.iter
    (fun m ->
      Alcotest.(check (list (pair string string)))
        "casts, with origins" expected (List.sort compare !(m.casts)))
    ours;
  (* End of input: the kernel member leaves; we install a view of two. *)
  Unix.close wr;
  let status = ref None in
  let rec poll () =
    match Unix.waitpid [ WNOHANG ] (Option.get !pid) with
    | 0, _ -> ignore (Loop.after loop (Time.of_ms 20) poll : Loop.timer)
    | _, st ->
        pid := None;
        status := Some st
  in
  poll ();
  run_until "the kernel member's leave" (fun () -> !status <> None && one_view ours 2);
  let said = read_file out in
  Alcotest.(check bool) "the kernel member exited cleanly" true (!status = Some (Unix.WEXITED 0));
  let lines = String.split_on_char '\n' said in
  let has l =
    if not (List.mem l lines) then Alcotest.failf "the kernel member did not say %S:\n%s" l said
  in
  has (Printf.sprintf "cast from %s: from A over our stack" (G.me a.g));
  has (Printf.sprintf "cast from %s: from B over our stack" (G.me b.g));
  has (Printf.sprintf "cast from %s: from the kernel member" kernel_id);
  has "left the group";
  let all_three l =
    starts_with l "view "
    && List.for_all
         (fun id -> List.mem id (String.split_on_char ' ' l))
         [ G.me a.g; G.me b.g; kernel_id ]
  in
  if not (List.exists all_three lines) then
    Alcotest.failf "the kernel member never saw a view of three:\n%s" said;
  List.iter
    (fun m ->
      Alcotest.(check bool) "the kernel member is gone" false (List.mem kernel_id (view_members m)))
    ours;
  let crossed (up : Up.t) = (Ipstack.Udp.query up.stack.udp).datagrams_in in
  Alcotest.(check bool)
    "datagrams came in over both TAP devices" true
    (crossed up_a > 0 && crossed up_b > 0);
  let t2 = Unix.gettimeofday () in
  G.leave a.g;
  run_until "A's leave" (fun () -> !(a.exited) && one_view [ b ] 1);
  G.leave b.g;
  run_until "B's leave" (fun () -> !(b.exited));
  let left = Unix.gettimeofday () -. t2 in
  Alcotest.(check int) "group buffers" 0 (Pool.leak_check gpool);
  Logs.app (fun m ->
      m
        "one view of three in %.2f s; three casts delivered at our members in %.1f ms; both left \
         in %.2f s; %a / %a"
        formed (delivered *. 1000.) left Udp.pp_info
        (Ipstack.Udp.query up_a.stack.udp)
        Udp.pp_info
        (Ipstack.Udp.query up_b.stack.udp))

let () =
  Logs.set_reporter (Logs_fmt.reporter ());
  Logs.set_level (Some Logs.Warning);
  Alcotest.run "net_group_tap"
    [
      ( "tap",
        [
          Alcotest.test_case "vsync group: two members over our stack on TAP, one over kernel UDP"
            `Quick group_over_tap;
        ] );
    ]
