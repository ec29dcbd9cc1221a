(* Self-describing test contents: a header line naming the seed, the index and
   the length, then bytes that follow from them. [check s] tells whether [s]
   is one whole such content, so a test can recognise a half-written file. *)

let size ~seed ~i =
  match (seed + (i * 7)) mod 6 with
  | 0 -> 0
  | 1 -> 100
  | 2 -> 10_000
  | 3 -> 65_536
  | 4 -> 150_000
  | _ -> 1 + (((seed * 31) + (i * 1009)) mod 120_000)

let content ~seed ~i =
  (* Some indices repeat the previous content, so that blobs are shared. *)
  let i = if i mod 7 = 3 then i - 1 else i in
  let n = size ~seed ~i in
  let header = Printf.sprintf "consort-capfs-test %d %d %d\n" seed i n in
  let st = Random.State.make [| seed; i |] in
  header ^ String.init n (fun _ -> Char.chr (Random.State.int st 256))

let check s =
  match String.index_opt s '\n' with
  | None -> false
  | Some nl -> (
      match String.split_on_char ' ' (String.sub s 0 nl) with
      | [ "consort-capfs-test"; seed; i; _ ] -> (
          match (int_of_string_opt seed, int_of_string_opt i) with
          | Some seed, Some i -> content ~seed ~i = s
          | _ -> false)
      | _ -> false)
