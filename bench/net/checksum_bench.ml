open Consort_net

type row = { size : int; checksum_gbps : float; memcpy_gbps : float; reference_gbps : float }

let now_ns () = Int64.to_int (Mtime.to_uint64_ns (Mtime_clock.now ()))

(* Calls [f i] for i = 0, 1, ... in batches until [seconds] pass; the
   result is bytes per nanosecond, i.e. GB/s. *)
let measure ~seconds ~size f =
  let best = ref 0. in
  for _ = 1 to 3 do
    let t0 = now_ns () in
    let deadline = t0 + int_of_float (seconds *. 1e9) in
    let n = ref 0 in
    let batch = max 1 (1_000_000 / (size + 64)) in
    while now_ns () < deadline do
      for i = 0 to batch - 1 do
        f (!n + i)
      done;
      n := !n + batch
    done;
    let dt = now_ns () - t0 in
    let gbps = float_of_int (!n * size) /. float_of_int dt in
    if gbps > !best then best := gbps
  done;
  !best

let sink = ref 0

let one ~seconds size =
  let ring = max 2 (262144 / size) in
  let ring = min ring 64 in
  let srcs =
    Array.init ring (fun k ->
        Cstruct.of_string (String.init size (fun i -> Char.chr ((i + k) land 255))))
  in
  let dst = Cstruct.create size in
  let checksum_gbps =
    measure ~seconds ~size (fun i -> sink := !sink + Checksum.sum srcs.(i mod ring))
  in
  let memcpy_gbps = measure ~seconds ~size (fun i -> Cstruct.blit srcs.(i mod ring) 0 dst 0 size) in
  let reference_gbps =
    measure ~seconds:(seconds /. 4.) ~size (fun i ->
        sink := !sink + Checksum.Reference.sum srcs.(i mod ring))
  in
  { size; checksum_gbps; memcpy_gbps; reference_gbps }

let run ?(sizes = [ 64; 576; 1500; 9000; 65536 ]) ?(seconds = 0.1) () =
  List.map (one ~seconds) sizes

let pp_table ppf rows =
  Fmt.pf ppf "%8s %14s %14s %10s %16s@." "bytes" "checksum GB/s" "memcpy GB/s" "ratio"
    "OCaml ref GB/s";
  List.iter
    (fun r ->
      Fmt.pf ppf "%8d %14.2f %14.2f %10.2f %16.2f@." r.size r.checksum_gbps r.memcpy_gbps
        (r.checksum_gbps /. r.memcpy_gbps)
        r.reference_gbps)
    rows
