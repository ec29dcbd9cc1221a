(* What the process tests on loopback share: the binary, temporary files,
   and capturing the members' datagrams with tcpdump. *)

module P = Consort_member.Procs

let exe () =
  let dir = Filename.dirname Sys.executable_name in
  let candidates = [ Filename.concat dir "../../bin/main.exe"; "_build/default/bin/main.exe" ] in
  match List.find_opt Sys.file_exists candidates with
  | Some e -> e
  | None -> Alcotest.fail "consort binary not found"

let expect what ok = if not ok then Alcotest.failf "timed out waiting until %s" what

let temp_dir () =
  let d =
    Filename.concat (Filename.get_temp_dir_name ())
      (Printf.sprintf "consort-poison-%d" (Unix.getpid ()))
  in
  if not (Sys.file_exists d) then Unix.mkdir d 0o755;
  d

let read_file f =
  match open_in_bin f with
  | exception Sys_error _ -> ""
  | ic ->
      let s = really_input_string ic (in_channel_length ic) in
      close_in ic;
      s

(* {1 Capture} *)

(* The UDP payloads of a pcap file of Ethernet frames (tcpdump on lo),
   with their destination ports. *)
let pcap_payloads file =
  let s = read_file file in
  let n = String.length s in
  let u32 off = Int32.to_int (String.get_int32_le s off) land 0xffff_ffff in
  let rec go off acc =
    if off + 16 > n then List.rev acc
    else
      let incl = u32 (off + 8) in
      let frame = off + 16 in
      if frame + incl > n then List.rev acc
      else
        let acc =
          if incl >= 14 + 20 + 8 && String.get_uint16_be s (frame + 12) = 0x0800 then
            let ihl = Char.code s.[frame + 14] land 15 * 4 in
            let udp = frame + 14 + ihl in
            if Char.code s.[frame + 14 + 9] = 17 && udp + 8 <= frame + incl then
              let dport = String.get_uint16_be s (udp + 2) in
              let len = min (String.get_uint16_be s (udp + 4) - 8) (frame + incl - udp - 8) in
              if len >= 0 then (dport, String.sub s (udp + 8) len) :: acc else acc
            else acc
          else acc
        in
        go (frame + incl) acc
  in
  if n < 24 then [] else go 24 []

let port_of addr = int_of_string (List.nth (String.split_on_char ':' addr) 1)

(* Runs tcpdump on lo for the members' ports while [f] runs. *)
let capture ~dir ms f =
  let file = Filename.concat dir "capture.pcap" in
  let filter =
    String.concat " or " (List.map (fun m -> "udp dst port " ^ string_of_int (port_of m.P.addr)) ms)
  in
  let err = Filename.concat dir "tcpdump.err" in
  let null = Unix.openfile "/dev/null" [ Unix.O_WRONLY ] 0 in
  let errfd = Unix.openfile err [ Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC ] 0o644 in
  let pid =
    try
      Unix.create_process "tcpdump"
        [| "tcpdump"; "-i"; "lo"; "--immediate-mode"; "-U"; "-n"; "-s"; "0"; "-w"; file; filter |]
        Unix.stdin null errfd
    with Unix.Unix_error (e, _, _) ->
      Alcotest.failf "tcpdump: %s (make test installs it)" (Unix.error_message e)
  in
  Unix.close null;
  Unix.close errfd;
  (* tcpdump says "listening on" once it captures. *)
  let listening () =
    let s = read_file err in
    let k = String.length "listening on" in
    let rec go i = i + k <= String.length s && (String.sub s i k = "listening on" || go (i + 1)) in
    go 0
  in
  let deadline = Unix.gettimeofday () +. 20. in
  while (not (listening ())) && Unix.gettimeofday () < deadline do
    Unix.sleepf 0.05
  done;
  if not (listening ()) then Alcotest.failf "tcpdump did not start: %s" (read_file err);
  Fun.protect
    ~finally:(fun () ->
      (* Time for tcpdump to read what the kernel holds for it. *)
      Unix.sleepf 0.5;
      (try Unix.kill pid Sys.sigterm with Unix.Unix_error _ -> ());
      ignore (Unix.waitpid [] pid))
    f;
  pcap_payloads file

(* The last "counters ..." line a member printed, as (LAYER.NAME, VALUE). *)
let counters out =
  let lines =
    List.filter
      (fun l -> String.length l > 9 && String.sub l 0 9 = "counters ")
      (String.split_on_char '\n' (read_file out))
  in
  match List.rev lines with
  | [] -> Alcotest.failf "%s: no counters line" out
  | l :: _ ->
      List.filter_map
        (fun kv ->
          match String.split_on_char '=' kv with [ k; v ] -> Some (k, int_of_string v) | _ -> None)
        (List.tl (String.split_on_char ' ' l))

let get cs k = Option.value ~default:0 (List.assoc_opt k cs)

(* [contains s sub]: whether [sub] occurs in [s]. *)
let contains s sub =
  let n = String.length s and k = String.length sub in
  let rec go i = i + k <= n && (String.sub s i k = sub || go (i + 1)) in
  go 0

(* Sends each datagram to each loopback port of [targets], ignoring errors
   (a port with no member is part of the attack). *)
let send_all targets datagrams =
  let sock = Unix.socket ~cloexec:true Unix.PF_INET Unix.SOCK_DGRAM 0 in
  Fun.protect
    ~finally:(fun () -> Unix.close sock)
    (fun () ->
      (* Paced, a little at a time: a burst would overflow the receivers'
         socket buffers on a loaded machine, and what the kernel drops is
         never counted. *)
      List.iteri
        (fun i d ->
          if i > 0 && i mod 100 = 0 then Unix.sleepf 0.002;
          List.iter
            (fun p ->
              try
                ignore
                  (Unix.sendto_substring sock d 0 (String.length d) []
                     (Unix.ADDR_INET (Unix.inet_addr_loopback, p)))
              with Unix.Unix_error _ -> ())
            targets)
        datagrams)
