(* Random, and the process id mixed in: processes forked from one that
   seeded its generator draw the same bytes. *)
let fresh () =
  Int64.logxor
    (Int64.of_string ("0x" ^ Consort_crypto.Crypto.to_hex (Consort_crypto.Crypto.random 7)))
    (Int64.shift_left (Int64.of_int (Unix.getpid ())) 24)
