type paws = Fresh | Stale | Missing

let paws ~ts_ok ~rst ~syn ~ts_val ~ts_recent ~ts_recent_age ~now =
  if (not ts_ok) || rst then Fresh
  else
    match ts_val with
    | None -> if syn then Fresh else Missing
    | Some v ->
        if
          Tcp_seq.lt (Tcp_seq.of_int v) (Tcp_seq.of_int ts_recent)
          && now - ts_recent_age < Consort.Time.of_sec (24. *. 86400.)
        then Stale
        else Fresh

let update_ts_recent ~ts_val ~ts_recent ~seq ~last_ack_sent =
  Tcp_seq.geq (Tcp_seq.of_int ts_val) (Tcp_seq.of_int ts_recent) && Tcp_seq.leq seq last_ack_sent

let acceptable ~rcv_nxt ~rcv_wnd ~seq ~seg_len =
  let in_wnd s = Tcp_seq.between s ~low:rcv_nxt ~high:(Tcp_seq.add rcv_nxt rcv_wnd) in
  if seg_len = 0 then if rcv_wnd = 0 then Tcp_seq.equal seq rcv_nxt else in_wnd seq
  else rcv_wnd > 0 && (in_wnd seq || in_wnd (Tcp_seq.add seq (seg_len - 1)))

let zero_window_probe ~rcv_nxt ~rcv_wnd ~seq ~seg_len ~syn =
  rcv_wnd = 0 && seg_len > 0 && Tcp_seq.equal seq rcv_nxt && not syn

type rst = Reset | Challenge_ack

let rst ~rcv_nxt ~seq = if Tcp_seq.equal seq rcv_nxt then Reset else Challenge_ack

type syn = Back_to_listen | Syn_challenge_ack

let syn ~state ~passive =
  match state with Tcp_types.Syn_received when passive -> Back_to_listen | _ -> Syn_challenge_ack

type ack = Too_new | Too_old | Old | Duplicate | New of int

let ack ~snd_una ~snd_max ~max_snd_wnd ~ack =
  if Tcp_seq.gt ack snd_max then Too_new
  else if Tcp_seq.lt ack (Tcp_seq.add snd_una (-max_snd_wnd)) then Too_old
  else if Tcp_seq.lt ack snd_una then Old
  else if Tcp_seq.equal ack snd_una then Duplicate
  else New (Tcp_seq.sub ack snd_una)

let syn_received_ack ~snd_una ~snd_max ~ack = Tcp_seq.gt ack snd_una && Tcp_seq.leq ack snd_max

let window_update ~snd_una ~snd_wl1 ~snd_wl2 ~seq ~ack =
  Tcp_seq.geq ack snd_una
  && (Tcp_seq.lt snd_wl1 seq || (Tcp_seq.equal snd_wl1 seq && Tcp_seq.leq snd_wl2 ack))
