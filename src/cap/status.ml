type t =
  [ `Ok
  | `Capbad
  | `Combad
  | `Argbad
  | `Notnow
  | `Nospace
  | `Denied
  | `Nomem
  | `Exists
  | `Notfound
  | `Syserr
  | `Intr
  | `Overflow
  | `Writeprot
  | `Nomedium
  | `Other of int ]

let table : (t * int * string * string) list =
  [
    (`Ok, 0, "STD_OK", "done");
    (`Capbad, -1, "STD_CAPBAD", "bad capability");
    (`Combad, -2, "STD_COMBAD", "unknown command");
    (`Argbad, -3, "STD_ARGBAD", "bad argument");
    (`Notnow, -4, "STD_NOTNOW", "not now");
    (`Nospace, -5, "STD_NOSPACE", "no space left");
    (`Denied, -6, "STD_DENIED", "too few rights");
    (`Nomem, -7, "STD_NOMEM", "out of memory");
    (`Exists, -8, "STD_EXISTS", "already exists");
    (`Notfound, -9, "STD_NOTFOUND", "not found");
    (`Syserr, -10, "STD_SYSERR", "internal server error");
    (`Intr, -11, "STD_INTR", "interrupted");
    (`Overflow, -12, "STD_OVERFLOW", "too large");
    (`Writeprot, -13, "STD_WRITEPROT", "write-protected");
    (`Nomedium, -14, "STD_NOMEDIUM", "no medium");
  ]

let to_int = function
  | `Other n -> n
  | s -> (
      match List.find_opt (fun (s', _, _, _) -> s' = s) table with
      | Some (_, n, _, _) -> n
      | None -> assert false)

let of_int n =
  match List.find_opt (fun (_, n', _, _) -> n' = n) table with
  | Some (s, _, _, _) -> s
  | None -> `Other n

let codec = Consort.Codec.map ~name:"status" to_int of_int Consort.Codec.zigzag
let equal a b = to_int a = to_int b

let pp ppf s =
  match List.find_opt (fun (s', _, _, _) -> s' = s) table with
  | Some (_, _, name, why) -> Fmt.pf ppf "%s (%s)" name why
  | None -> Fmt.pf ppf "status %d" (to_int s)

let to_string s = Fmt.str "%a" pp s
let of_cap_error = function `Capbad -> `Capbad | `Denied -> `Denied
