module Codec = Consort.Codec
module Cap = Consort_cap.Cap
module Rights = Consort_cap.Rights
module Port = Consort_cap.Port
module SMap = Map.Make (String)

let max_columns = 4
let col i = Rights.of_int_exn (1 lsl i)
let columns_mask = Rights.of_int_exn 0x0f
let modify = Rights.r4
let delete = Rights.r5

type limits = {
  port : Port.t;
  server_secret : Cap.Secret.t;
  root_secret : Cap.Secret.t;
  max_name : int;
  max_capset : int;
  max_rows : int;
  max_install : int;
  max_dirs : int;
  max_total_rows : int;
  max_clients : int;
  lifetime : int;
}

let default_limits ~port ~server_secret ~root_secret =
  {
    port;
    server_secret;
    root_secret;
    max_name = 255;
    max_capset = 4;
    max_rows = 10_000;
    max_install = 256;
    max_dirs = 100_000;
    max_total_rows = 1_000_000;
    max_clients = 10_000;
    lifetime = 8;
  }

let root_obj = 1
let default_columns = [ "owner"; "group"; "other" ]

type kind = Directory | File | Server

let kind_of ~port (c : Cap.t) =
  if c.Cap.obj = 0 then Server else if Port.equal c.Cap.port port then Directory else File

let default_masks = function
  | Directory -> [ Rights.all; Rights.of_int_exn 0x06; Rights.of_int_exn 0x04 ]
  | File -> [ Rights.all; Rights.read; Rights.read ]
  | Server -> [ Rights.all; Rights.read; Rights.none ]

type row_spec = { name : string; masks : Rights.t list; caps : Cap.t list }

type op =
  | Lookup of { dir : Cap.t; name : string }
  | List of Cap.t
  | Create of {
      via : Cap.t;
      secret : string;
      columns : string list;
      link : (string * Rights.t list) option;
    }
  | Install of { dir : Cap.t; expect : int option; rows : row_spec list }
  | Delete of { dir : Cap.t; name : string }
  | Chmod of { dir : Cap.t; name : string; masks : Rights.t list }
  | Touch of Cap.t
  | Refs of { server : Cap.t; dir : int }
  | Age of Cap.t

type entry = Narrowed of Cap.t | Withheld of Port.t

type error =
  | Capbad
  | Denied of string
  | Not_found of string
  | Exists of string
  | Conflict of int
  | Bad of string
  | Limit of string

type response =
  | Caps of entry list
  | Listing of { seq : int; columns : string list; rows : (string * Rights.t list) list }
  | Created of { cap : Cap.t; seq : int }
  | Done of int
  | Objects of Cap.t list
  | Aged of int list
  | Error of error

type row = { masks : Rights.t array; caps : Cap.t list }

type dir = {
  secret : Cap.Secret.t;
  columns : string array;
  mutable rows : row SMap.t;
  mutable seq : int;
  mutable life : int;
}

type t = {
  lim : limits;
  dirs : (int, dir) Hashtbl.t;
  mutable next : int;
  mutable total_rows : int;
  dedup : response Consort_kv.Dedup.t;
}

let create lim =
  let t =
    {
      lim;
      dirs = Hashtbl.create 64;
      next = root_obj + 1;
      total_rows = 0;
      dedup = Consort_kv.Dedup.create ();
    }
  in
  Hashtbl.replace t.dirs root_obj
    {
      secret = lim.root_secret;
      columns = Array.of_list default_columns;
      rows = SMap.empty;
      seq = 0;
      life = lim.lifetime;
    };
  t

let limits t = t.lim
let root t = Cap.owner t.lim.port ~obj:root_obj t.lim.root_secret
let server_cap t = Cap.owner t.lim.port ~obj:0 t.lim.server_secret
let dirs t = Hashtbl.length t.dirs
let mem t obj = Hashtbl.mem t.dirs obj
let life t obj = Option.map (fun d -> d.life) (Hashtbl.find_opt t.dirs obj)
let seq t obj = Option.map (fun d -> d.seq) (Hashtbl.find_opt t.dirs obj)

let secret t obj =
  if obj = 0 then Some t.lim.server_secret
  else Option.map (fun d -> d.secret) (Hashtbl.find_opt t.dirs obj)

let info t obj =
  if obj = 0 then Printf.sprintf "directory server, %d directories" (Hashtbl.length t.dirs)
  else
    match Hashtbl.find_opt t.dirs obj with
    | Some d ->
        Printf.sprintf "directory, %d rows, seq %d, columns %s" (SMap.cardinal d.rows) d.seq
          (String.concat ":" (Array.to_list d.columns))
    | None -> "-"

let objects t = Hashtbl.fold (fun k _ acc -> k :: acc) t.dirs [] |> List.sort compare
let is_read = function Lookup _ | List _ -> true | _ -> false

(* {1 Checks} *)

let check_name lim n =
  if n = "" then Stdlib.Error "an empty name"
  else if String.length n > lim.max_name then
    Stdlib.Error (Printf.sprintf "a name over %d bytes" lim.max_name)
  else if n = "." || n = ".." then Stdlib.Error "the names . and .. are reserved"
  else if String.contains n '/' then Stdlib.Error "a name with a /"
  else if String.exists (fun c -> Char.code c < 32) n then
    Stdlib.Error "a name with a control character"
  else Ok ()

let check_row_spec lim (r : row_spec) =
  match check_name lim r.name with
  | Stdlib.Error e -> Stdlib.Error e
  | Ok () ->
      if List.length r.masks > max_columns then
        Stdlib.Error (Printf.sprintf "more than %d column masks" max_columns)
      else if r.caps = [] then Stdlib.Error "a row without a capability"
      else if List.length r.caps > lim.max_capset then
        Stdlib.Error (Printf.sprintf "more than %d capabilities in a row" lim.max_capset)
      else Ok ()

let check lim = function
  | Lookup { name; _ } | Delete { name; _ } -> check_name lim name
  | Chmod { name; masks; _ } ->
      Result.bind (check_name lim name) (fun () ->
          if List.length masks > max_columns then
            Stdlib.Error (Printf.sprintf "more than %d column masks" max_columns)
          else Ok ())
  | Create { secret; columns; link; _ } -> (
      if String.length secret <> 32 then Stdlib.Error "a directory secret of other than 32 bytes"
      else if columns = [] || List.length columns > max_columns then
        Stdlib.Error (Printf.sprintf "1 to %d columns" max_columns)
      else if List.exists (fun c -> c = "" || String.length c > 32) columns then
        Stdlib.Error "a column name empty or over 32 bytes"
      else
        match link with
        | None -> Ok ()
        | Some (n, masks) ->
            Result.bind (check_name lim n) (fun () ->
                if List.length masks > max_columns then
                  Stdlib.Error (Printf.sprintf "more than %d column masks" max_columns)
                else Ok ()))
  | Install { rows; _ } ->
      if rows = [] then Stdlib.Error "an install of no row"
      else if List.length rows > lim.max_install then
        Stdlib.Error (Printf.sprintf "more than %d rows in one install" lim.max_install)
      else
        let rec go seen = function
          | [] -> Ok ()
          | r :: rest -> (
              match check_row_spec lim r with
              | Stdlib.Error e -> Stdlib.Error e
              | Ok () ->
                  if List.mem r.name seen then
                    Stdlib.Error ("the name " ^ r.name ^ " twice in one install")
                  else go (r.name :: seen) rest)
        in
        go [] rows
  | List _ | Touch _ | Refs _ | Age _ -> Ok ()

(* {1 Rights} *)

let find_dir t (c : Cap.t) ~need =
  if not (Port.equal c.port t.lim.port) then Stdlib.Error Capbad
  else
    match Hashtbl.find_opt t.dirs c.obj with
    | None -> Stdlib.Error (Not_found "no such directory")
    | Some d -> (
        match Cap.validate d.secret ~port:t.lim.port ~need c with
        | Ok () -> Ok d
        | Error `Capbad -> Stdlib.Error Capbad
        | Error `Denied ->
            Stdlib.Error
              (Denied
                 (Printf.sprintf "needs %s, has %s" (Rights.to_string need)
                    (Rights.to_string c.rights))))

let check_server t (c : Cap.t) =
  if (not (Port.equal c.port t.lim.port)) || c.obj <> 0 then Stdlib.Error Capbad
  else
    match Cap.validate t.lim.server_secret ~port:t.lim.port ~need:Rights.admin c with
    | Ok () -> Ok ()
    | Error `Capbad -> Stdlib.Error Capbad
    | Error `Denied -> Stdlib.Error (Denied "needs admin on the server capability")

(* The rights a directory capability may see in a row: the union of the
   masks of the columns its rights select. *)
let mask_for (dircap : Cap.t) (d : dir) (r : row) =
  let m = ref Rights.none in
  Array.iteri
    (fun i mask ->
      if i < Array.length d.columns && Rights.mem (col i) dircap.rights then
        m := Rights.union !m mask)
    r.masks;
  !m

(* A stored capability narrowed to [mask], when this server can do it
   alone: it fits already, it is an owner capability, or it names one of
   this server's directories (checked first: a forged one is never made
   good). Otherwise only its server could narrow it, and it is withheld. *)
let narrow t (c : Cap.t) mask =
  if Rights.subset c.rights mask then Narrowed c
  else
    match Hashtbl.find_opt t.dirs c.obj with
    | Some d when Port.equal c.port t.lim.port ->
        if Result.is_ok (Cap.validate d.secret ~port:t.lim.port ~need:Rights.none c) then
          Narrowed (Cap.restrict_with_secret d.secret c mask)
        else Withheld c.port
    | _ -> (
        match Cap.restrict c mask with Ok n -> Narrowed n | Error `Needs_server -> Withheld c.port)

let masks_array d masks =
  Array.init (Array.length d.columns) (fun i ->
      match List.nth_opt masks i with Some m -> m | None -> Rights.none)

let err e = Error e

let bump d =
  d.seq <- d.seq + 1;
  Done d.seq

let execute t op =
  match check t.lim op with
  | Error e -> err (Bad e)
  | Ok () -> (
      let ( let* ) r f = match r with Ok x -> f x | Stdlib.Error e -> err e in
      match op with
      | Lookup { dir; name } -> (
          let* d = find_dir t dir ~need:Rights.none in
          match SMap.find_opt name d.rows with
          | None -> err (Not_found name)
          | Some r ->
              let mask = mask_for dir d r in
              Caps (List.map (fun c -> narrow t c mask) r.caps))
      | List dir ->
          let* d = find_dir t dir ~need:Rights.none in
          if Rights.inter dir.rights columns_mask = Rights.none then
            err (Denied "needs a column right")
          else
            Listing
              {
                seq = d.seq;
                columns = Array.to_list d.columns;
                rows =
                  SMap.bindings d.rows
                  |> List.map (fun (n, (r : row)) -> (n, Array.to_list r.masks));
              }
      | Create { via; secret; columns; link } -> (
          let* v = find_dir t via ~need:modify in
          let fits_link =
            match link with
            | None -> Ok ()
            | Some (n, _) ->
                if SMap.mem n v.rows then Stdlib.Error (Exists n)
                else if
                  SMap.cardinal v.rows >= t.lim.max_rows || t.total_rows >= t.lim.max_total_rows
                then Stdlib.Error (Limit "too many rows")
                else Ok ()
          in
          let* () = fits_link in
          if Hashtbl.length t.dirs >= t.lim.max_dirs then
            err (Limit (Printf.sprintf "%d directories" t.lim.max_dirs))
          else
            let secret = Result.get_ok (Cap.Secret.of_raw secret) in
            let obj = t.next in
            t.next <- t.next + 1;
            let d =
              {
                secret;
                columns = Array.of_list columns;
                rows = SMap.empty;
                seq = 0;
                life = t.lim.lifetime;
              }
            in
            Hashtbl.replace t.dirs obj d;
            let cap = Cap.owner t.lim.port ~obj secret in
            match link with
            | None -> Created { cap; seq = v.seq }
            | Some (n, masks) ->
                v.rows <- SMap.add n { masks = masks_array v masks; caps = [ cap ] } v.rows;
                t.total_rows <- t.total_rows + 1;
                v.seq <- v.seq + 1;
                Created { cap; seq = v.seq })
      | Install { dir; expect; rows } -> (
          let* d = find_dir t dir ~need:modify in
          match expect with
          | Some s when s <> d.seq -> err (Conflict d.seq)
          | _ ->
              let fresh =
                List.length (List.filter (fun (r : row_spec) -> not (SMap.mem r.name d.rows)) rows)
              in
              if SMap.cardinal d.rows + fresh > t.lim.max_rows then
                err (Limit (Printf.sprintf "%d rows in a directory" t.lim.max_rows))
              else if t.total_rows + fresh > t.lim.max_total_rows then
                err (Limit "too many rows on this server")
              else begin
                List.iter
                  (fun (r : row_spec) ->
                    d.rows <-
                      SMap.add r.name { masks = masks_array d r.masks; caps = r.caps } d.rows)
                  rows;
                t.total_rows <- t.total_rows + fresh;
                bump d
              end)
      | Delete { dir; name } ->
          let* d = find_dir t dir ~need:delete in
          if not (SMap.mem name d.rows) then err (Not_found name)
          else begin
            d.rows <- SMap.remove name d.rows;
            t.total_rows <- t.total_rows - 1;
            bump d
          end
      | Chmod { dir; name; masks } -> (
          let* d = find_dir t dir ~need:modify in
          match SMap.find_opt name d.rows with
          | None -> err (Not_found name)
          | Some r ->
              d.rows <- SMap.add name { r with masks = masks_array d masks } d.rows;
              bump d)
      | Touch c ->
          let* d = find_dir t c ~need:Rights.none in
          d.life <- t.lim.lifetime;
          Done d.seq
      | Refs { server; dir } -> (
          let* () = check_server t server in
          match Hashtbl.find_opt t.dirs dir with
          | None -> err (Not_found "no such directory")
          | Some d ->
              Objects
                (SMap.fold (fun _ (r : row) acc -> List.rev_append r.caps acc) d.rows [] |> List.rev)
          )
      | Age server ->
          let* () = check_server t server in
          let gone =
            Hashtbl.fold
              (fun obj d acc ->
                if obj = root_obj then acc
                else begin
                  d.life <- d.life - 1;
                  if d.life <= 0 then obj :: acc else acc
                end)
              t.dirs []
            |> List.sort compare
          in
          List.iter
            (fun obj ->
              let d = Hashtbl.find t.dirs obj in
              t.total_rows <- t.total_rows - SMap.cardinal d.rows;
              Hashtbl.remove t.dirs obj)
            gone;
          Aged gone)

let apply t ~client ~req op =
  if is_read op then (execute t op, false)
  else if match op with Touch _ -> true | _ -> false then
    (* Idempotent: a collector's touches need no place in the table of
       clients, where thousands of them would push real clients out. *)
    match execute t op with
    | Error _ as r -> (r, false)
    | r -> (r, true)
  else
    Consort_kv.Dedup.apply t.dedup ~max_clients:t.lim.max_clients ~client ~req
      ~older:(fun why -> Error (Bad why))
      (fun () -> execute t op)

(* {1 Codecs} *)

let rights_codec = Codec.conv ~name:"rights" Rights.to_int Rights.of_int Codec.uint8
let name_c = Codec.string ~max:4096 ()
let masks_c = Codec.list ~max:max_columns rights_codec
let caps_c = Codec.list ~max:64 Cap.codec

let row_spec_c =
  Codec.map
    (fun (r : row_spec) -> (r.name, r.masks, r.caps))
    (fun (name, masks, caps) -> { name; masks; caps })
    (Codec.tup3 name_c masks_c caps_c)

let op_codec =
  let open Codec in
  union "dir-op"
    [
      case 0 "lookup" (pair Cap.codec name_c)
        (function Lookup { dir; name } -> Some (dir, name) | _ -> None)
        (fun (dir, name) -> Lookup { dir; name });
      case 1 "list" Cap.codec (function List c -> Some c | _ -> None) (fun c -> List c);
      case 2 "create"
        (tup4 Cap.codec (string ~max:64 ())
           (list ~max:max_columns (string ~max:64 ()))
           (option (pair name_c masks_c)))
        (function
          | Create { via; secret; columns; link } -> Some (via, secret, columns, link) | _ -> None)
        (fun (via, secret, columns, link) -> Create { via; secret; columns; link });
      case 3 "install"
        (tup3 Cap.codec (option varint) (list ~max:4096 row_spec_c))
        (function Install { dir; expect; rows } -> Some (dir, expect, rows) | _ -> None)
        (fun (dir, expect, rows) -> Install { dir; expect; rows });
      case 4 "delete" (pair Cap.codec name_c)
        (function Delete { dir; name } -> Some (dir, name) | _ -> None)
        (fun (dir, name) -> Delete { dir; name });
      case 5 "chmod" (tup3 Cap.codec name_c masks_c)
        (function Chmod { dir; name; masks } -> Some (dir, name, masks) | _ -> None)
        (fun (dir, name, masks) -> Chmod { dir; name; masks });
      case 6 "touch" Cap.codec (function Touch c -> Some c | _ -> None) (fun c -> Touch c);
      case 7 "refs" (pair Cap.codec varint)
        (function Refs { server; dir } -> Some (server, dir) | _ -> None)
        (fun (server, dir) -> Refs { server; dir });
      case 8 "age" Cap.codec (function Age c -> Some c | _ -> None) (fun c -> Age c);
    ]

let entry_codec =
  let open Codec in
  union "dir-entry"
    [
      case 0 "narrowed" Cap.codec
        (function Narrowed c -> Some c | _ -> None)
        (fun c -> Narrowed c);
      case 1 "withheld" Port.codec
        (function Withheld p -> Some p | _ -> None)
        (fun p -> Withheld p);
    ]

let error_codec =
  let open Codec in
  let s = string ~max:4096 () in
  union "dir-error"
    [
      case 0 "capbad" unit (function Capbad -> Some () | _ -> None) (fun () -> Capbad);
      case 1 "denied" s (function Denied x -> Some x | _ -> None) (fun x -> Denied x);
      case 2 "not-found" s (function Not_found x -> Some x | _ -> None) (fun x -> Not_found x);
      case 3 "exists" s (function Exists x -> Some x | _ -> None) (fun x -> Exists x);
      case 4 "conflict" varint (function Conflict x -> Some x | _ -> None) (fun x -> Conflict x);
      case 5 "bad" s (function Bad x -> Some x | _ -> None) (fun x -> Bad x);
      case 6 "limit" s (function Limit x -> Some x | _ -> None) (fun x -> Limit x);
    ]

let response_codec =
  let open Codec in
  union "dir-response"
    [
      case 0 "caps" (list ~max:64 entry_codec)
        (function Caps l -> Some l | _ -> None)
        (fun l -> Caps l);
      case 1 "listing"
        (tup3 varint
           (list ~max:max_columns (string ~max:64 ()))
           (list ~max:1_000_000 (pair name_c masks_c)))
        (function Listing { seq; columns; rows } -> Some (seq, columns, rows) | _ -> None)
        (fun (seq, columns, rows) -> Listing { seq; columns; rows });
      case 2 "created" (pair Cap.codec varint)
        (function Created { cap; seq } -> Some (cap, seq) | _ -> None)
        (fun (cap, seq) -> Created { cap; seq });
      case 3 "done" varint (function Done s -> Some s | _ -> None) (fun s -> Done s);
      case 4 "objects" (list ~max:1_000_000 Cap.codec)
        (function Objects l -> Some l | _ -> None)
        (fun l -> Objects l);
      case 5 "aged" (list ~max:max_int varint)
        (function Aged l -> Some l | _ -> None)
        (fun l -> Aged l);
      case 6 "error" error_codec (function Error e -> Some e | _ -> None) (fun e -> Error e);
    ]

let secret_c = Codec.conv ~name:"secret" Cap.Secret.to_raw Cap.Secret.of_raw (Codec.fixed_string 32)

let dir_codec =
  let open Codec in
  map ~name:"dir"
    (fun (obj, d) ->
      ( (obj, d.secret, Array.to_list d.columns),
        (d.seq, d.life),
        SMap.bindings d.rows |> List.map (fun (n, (r : row)) -> (n, Array.to_list r.masks, r.caps))
      ))
    (fun ((obj, secret, columns), (seq, life), rows) ->
      let columns = Array.of_list columns in
      ( obj,
        {
          secret;
          columns;
          seq;
          life;
          rows =
            List.fold_left
              (fun m (n, masks, caps) -> SMap.add n { masks = Array.of_list masks; caps } m)
              SMap.empty rows;
        } ))
    (tup3
       (tup3 varint secret_c (list ~max:max_columns (string ~max:64 ())))
       (pair varint zigzag)
       (list ~max:max_int (tup3 name_c masks_c caps_c)))

let codec lim =
  let open Codec in
  map ~name:"dir-state"
    (fun t ->
      ( t.next,
        Hashtbl.fold (fun obj d acc -> (obj, d) :: acc) t.dirs []
        |> List.sort (fun (a, _) (b, _) -> compare a b),
        t.dedup ))
    (fun (next, dirs, dedup) ->
      let t = { lim; dirs = Hashtbl.create 64; next; total_rows = 0; dedup } in
      List.iter
        (fun (obj, d) ->
          Hashtbl.replace t.dirs obj d;
          t.total_rows <- t.total_rows + SMap.cardinal d.rows)
        dirs;
      t)
    (tup3 varint (list ~max:max_int dir_codec) (Consort_kv.Dedup.codec response_codec))

let digest t = Digest.to_hex (Digest.string (Codec.encode_string (codec t.lim) t))

(* {1 Printing} *)

let pp_error ppf = function
  | Capbad -> Fmt.string ppf "bad capability (STD_CAPBAD)"
  | Denied w -> Fmt.pf ppf "denied: %s" w
  | Not_found n -> Fmt.pf ppf "not found: %s" n
  | Exists n -> Fmt.pf ppf "exists: %s" n
  | Conflict s -> Fmt.pf ppf "conflict: the directory is at sequence number %d" s
  | Bad w -> Fmt.pf ppf "bad request: %s" w
  | Limit w -> Fmt.pf ppf "limit reached: %s" w

let pp_masks = Fmt.(list ~sep:(any " ") Rights.pp)

let pp_response ppf = function
  | Caps l ->
      Fmt.(
        list ~sep:(any "@\n") (fun ppf -> function
          | Narrowed c -> Cap.pp_text ppf c
          | Withheld p -> Fmt.pf ppf "withheld (only its server %a can narrow it)" Port.pp p))
        ppf l
  | Listing { seq; columns; rows } ->
      Fmt.pf ppf "seq %d  columns %a" seq Fmt.(list ~sep:(any ",") string) columns;
      List.iter (fun (n, m) -> Fmt.pf ppf "@\n%s  %a" n pp_masks m) rows
  | Created { cap; _ } -> Cap.pp_text ppf cap
  | Done s -> Fmt.pf ppf "ok seq %d" s
  | Objects l -> Fmt.(list ~sep:(any "@\n") Cap.pp_text) ppf l
  | Aged l -> Fmt.pf ppf "aged: %d removed" (List.length l)
  | Error e -> pp_error ppf e

let op_size = function
  | Lookup { name; _ } | Delete { name; _ } | Chmod { name; _ } -> 64 + String.length name
  | List _ | Touch _ | Refs _ | Age _ -> 64
  | Create { columns; link; _ } -> (
      128
      + List.fold_left (fun a c -> a + String.length c) 0 columns
      + match link with Some (n, _) -> String.length n | None -> 0)
  | Install { rows; _ } ->
      64
      + List.fold_left
          (fun a (r : row_spec) ->
            a + 16 + String.length r.name + (Cap.length * List.length r.caps))
          0 rows

module Rsm = struct
  type nonrec t = t
  type nonrec op = op
  type nonrec response = response
  type nonrec limits = limits

  let name = "capdir"

  (* A placeholder: a directory server is always opened with its own
     port and secrets. *)
  let default_limits =
    let z = Result.get_ok (Cap.Secret.of_raw (String.make 32 '\000')) in
    default_limits
      ~port:(Result.get_ok (Port.of_raw (String.make Port.length '\000')))
      ~server_secret:z ~root_secret:z

  let create = create
  let limits = limits
  let apply = apply

  (* Lookups and lists are ordered with the writes, as before read markers. *)
  let is_read _ = false
  let check = check
  let op_size = op_size
  let op_codec = op_codec
  let response_codec = response_codec
  let pp_response = pp_response
  let codec = codec
end
