type t = {
  initial : Consort.Time.t;
  min : Consort.Time.t;
  max : Consort.Time.t;
  mutable srtt : int;
  mutable rttvar : int;
  mutable measured : bool;
  mutable backoffs : int;
}

let granularity = Consort.Time.of_ms 1

let create ~initial ~min ~max =
  { initial; min; max; srtt = 0; rttvar = 0; measured = false; backoffs = 0 }

let sample ?(weight = 1) t r =
  let r = Stdlib.max r 0 in
  let weight = Stdlib.max weight 1 in
  if not t.measured then begin
    t.srtt <- r;
    t.rttvar <- r / 2;
    t.measured <- true
  end
  else begin
    t.rttvar <- t.rttvar + ((abs (t.srtt - r) - t.rttvar) / (4 * weight));
    t.srtt <- t.srtt + ((r - t.srtt) / (8 * weight))
  end;
  t.backoffs <- 0

let base t =
  if not t.measured then t.initial
  else Stdlib.max t.min (t.srtt + Stdlib.max granularity (4 * t.rttvar))

let rto t =
  let b = base t in
  let rec go v n = if n = 0 || v >= t.max then v else go (v * 2) (n - 1) in
  Stdlib.min t.max (go b t.backoffs)

let backoff t = if rto t < t.max then t.backoffs <- t.backoffs + 1
let backoffs t = t.backoffs
let srtt t = if t.measured then Some t.srtt else None
let rttvar t = if t.measured then Some t.rttvar else None

let pp ppf t =
  if t.measured then
    Fmt.pf ppf "rto %a srtt %a rttvar %a backoff %d" Consort.Time.pp (rto t) Consort.Time.pp t.srtt
      Consort.Time.pp t.rttvar t.backoffs
  else Fmt.pf ppf "rto %a (no sample) backoff %d" Consort.Time.pp (rto t) t.backoffs
