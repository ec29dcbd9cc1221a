(* The key of the off-path defences (ISNs, timestamp offsets, ports, SYN cookies) comes from the
   kernel's generator: two stacks draw different keys, and neither is a fixed one. *)

open Consort_net

let tuples = List.init 4 (fun i -> Printf.sprintf "10.0.0.%d:%d>10.0.0.9:80" (i + 1) (40000 + i))
let isns s = List.map (fun tuple -> Tcp_seq.to_int (Tcp_secret.isn s ~tuple ~now:0)) tuples

let fresh_keys_differ () =
  let a = Tcp_secret.create () and b = Tcp_secret.create () in
  (* Four 32-bit values: equal for two independent keys with probability 2^-128. *)
  Alcotest.(check bool) "two fresh secrets give different ISNs" false (isns a = isns b);
  let zero = Tcp_secret.create ~key:(String.make 32 '\000') () in
  Alcotest.(check bool) "a fresh secret is not the zero key" false (isns a = isns zero);
  let k = Tcp_secret.create ~key:"a key given for a reproducible test" () in
  let k' = Tcp_secret.create ~key:"a key given for a reproducible test" () in
  Alcotest.(check (list int)) "a given key gives the same ISNs" (isns k) (isns k')

let suite = [ Alcotest.test_case "fresh keys from the kernel" `Quick fresh_keys_differ ]
