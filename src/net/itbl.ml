include Hashtbl.Make (struct
  type t = int

  let equal (a : int) b = a = b

  (* Packed keys share low bits (a protocol number, say): mix them. *)
  let hash x =
    let x = x lxor (x lsr 29) in
    let x = x * 0x5bd1e995 in
    x lxor (x lsr 23) land max_int
end)
