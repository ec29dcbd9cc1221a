open Consort
module G = Consort_group

type t = {
  st : Stack.t;
  clock : Time.t ref;
  sent : (Event.dst * string) list ref;
  got : (Event.src * string) list ref;
  ctl : (Time.t * Event.up_ctl) list ref;
  pool : Pool.t;
  group : int;
}

let check_no_leaks pool =
  Alcotest.(check int) "leaked slices" 0 (Pool.leak_check pool);
  Alcotest.(check int) "segments still in use" 0 (Pool.stats pool).segments_in_use

let create ?(params = Params.empty) ?(fused = false) ?(group = "test") ?(n = 2) ?(rank = 0) layers =
  let pool = Pool.create () in
  let clock = ref 0 in
  let sent = ref [] and got = ref [] and ctl = ref [] in
  let view = View.v ~group ~members:(Array.init n (Printf.sprintf "m%d")) ~rank () in
  let ctx = { Layer.view; rng = Rng.create 7; params; pool; now = (fun () -> !clock) } in
  let net dst msg =
    sent := (dst, Msg.to_string msg) :: !sent;
    Msg.release msg
  in
  let deliver src msg =
    got := (src, Msg.to_string msg) :: !got;
    Msg.release msg
  in
  let on_ctl e = ctl := (!clock, e) :: !ctl in
  match Stack.create ~fused ctx layers ~net ~app:{ Stack.deliver; ctl = on_ctl } with
  | Error e -> Alcotest.fail e
  | Ok st -> { st; clock; sent; got; ctl; pool; group = View.stamp view }

let feed s bytes = Stack.recv s.st (Msg.of_iovec (Pool.of_string s.pool bytes))

let advance s time =
  s.clock := time;
  if Stack.next_alarm s.st <= time then Stack.timer s.st time

let run_until s time =
  let rec go k =
    let a = Stack.next_alarm s.st in
    if a <= time && k < 1_000_000 then begin
      s.clock := max !(s.clock) a;
      Stack.timer s.st !(s.clock);
      go (k + 1)
    end
  in
  go 0;
  s.clock := max !(s.clock) time

let counter_of st layer name =
  match List.assoc_opt layer (Stack.counters st) with
  | None -> Alcotest.failf "no layer %s" layer
  | Some l -> (
      match List.assoc_opt name l with
      | Some v -> v
      | None -> Alcotest.failf "no counter %s.%s" layer name)

let counter s = counter_of s.st

let stop s =
  Stack.dn_ctl s.st Event.Stop;
  check_no_leaks s.pool

let enc = Codec.encode_string

let from_send s r =
  enc G.Bottom.codec
    (G.Bottom.Send { group = s.group; origin = r; dst = (Stack.view s.st).View.rank })

let from_cast s r = enc G.Bottom.codec (G.Bottom.Cast { group = s.group; origin = r })

let split codec bytes =
  let cs = Cstruct.of_string bytes in
  match Codec.decode G.Bottom.codec cs 0 with
  | Error e -> Alcotest.failf "bottom header: %a" Codec.pp_error e
  | Ok (b, off) -> (
      match Codec.decode codec cs off with
      | Error e -> Alcotest.failf "header: %a" Codec.pp_error e
      | Ok (h, off) -> (b, h, String.sub bytes off (String.length bytes - off)))
