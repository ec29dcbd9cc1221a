type t =
  [ `Failure of string
  | `Notfound
  | `Badaddress of string
  | `Aborted
  | `Tryagain
  | `Combad of string
  | `Badport
  | `Unsafe of string ]

let outcome = function
  | `Notfound | `Badaddress _ | `Tryagain | `Badport | `Unsafe _ -> `Not_executed
  | `Failure _ | `Aborted | `Combad _ -> `Unknown

let pp ppf = function
  | `Failure why -> Fmt.pf ppf "RPC_FAILURE: %s (outcome unknown)" why
  | `Notfound -> Fmt.string ppf "RPC_NOTFOUND: no server answered for the port"
  | `Badaddress why -> Fmt.pf ppf "RPC_BADADDRESS: %s" why
  | `Aborted -> Fmt.string ppf "RPC_ABORTED: cancelled (outcome unknown)"
  | `Tryagain -> Fmt.string ppf "RPC_TRYAGAIN: the server is busy; not carried out"
  | `Combad why -> Fmt.pf ppf "RPC_COMBAD: %s (outcome unknown)" why
  | `Badport -> Fmt.string ppf "RPC_BADPORT: no valid port"
  | `Unsafe why -> Fmt.pf ppf "RPC_UNSAFE: %s" why

let to_string e = Fmt.str "%a" pp e
let equal (a : t) (b : t) = a = b
