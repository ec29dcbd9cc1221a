let std_age = 1001
let std_destroy = 1003
let std_info = 1004
let std_restrict = 1005
let std_status = 1006
let std_touch = 1007

type objects = {
  secret : int -> Cap.Secret.t option;
  info : int -> string;
  destroy : int -> Status.t;
  touch : int -> unit;
  age : unit -> unit;
  status : unit -> string;
}

let validate port objs ~need (h : Header.t) =
  match Header.cap h with
  | Error _ -> Error `Capbad
  | Ok c -> (
      if not (Port.equal c.Cap.port port) then Error `Capbad
      else
        match objs.secret c.Cap.obj with
        | None -> Error `Notfound
        | Some secret -> (
            match Cap.validate secret ~port ~need c with
            | Ok () -> Ok c.Cap.obj
            | Error e -> Error (Status.of_cap_error e)))

let err s = (Header.reply s, "")

let handle port objs (h : Header.t) _data =
  let with_obj need f =
    Some (match validate port objs ~need h with Error s -> err s | Ok obj -> f obj)
  in
  let c = h.Header.command in
  if c = std_info then with_obj Rights.none (fun obj -> (Header.reply `Ok, objs.info obj))
  else if c = std_status then with_obj Rights.none (fun _ -> (Header.reply `Ok, objs.status ()))
  else if c = std_touch then
    with_obj Rights.none (fun obj ->
        objs.touch obj;
        (Header.reply `Ok, ""))
  else if c = std_destroy then
    with_obj Rights.destroy (fun obj -> (Header.reply (objs.destroy obj), ""))
  else if c = std_age then
    with_obj Rights.admin (fun _ ->
        objs.age ();
        (Header.reply `Ok, ""))
  else if c = std_restrict then
    with_obj Rights.none (fun obj ->
        match (Rights.of_int h.Header.offset, objs.secret obj, Header.cap h) with
        | Ok mask, Some secret, Ok cap ->
            let r = Cap.restrict_with_secret secret cap mask in
            let port, priv = Header.of_cap r in
            (Header.reply ~port ~priv `Ok, "")
        | Error _, _, _ -> err `Argbad
        | _ -> err `Capbad)
  else None

let info_request c = Header.request c std_info
let restrict_request c r = Header.request ~offset:(Rights.to_int r) c std_restrict
let destroy_request c = Header.request c std_destroy
let touch_request c = Header.request c std_touch
let age_request c = Header.request c std_age
let status_request c = Header.request c std_status
let status_of (h : Header.t) = match h.Header.status with `Ok -> Ok () | s -> Error s
let parse_text ((h : Header.t), d) = Result.map (fun () -> d) (status_of h)
let parse_unit ((h : Header.t), _) = status_of h

let parse_restrict ((h : Header.t), _) =
  match status_of h with
  | Error s -> Error s
  | Ok () -> ( match Header.cap h with Ok c -> Ok c | Error _ -> Error `Syserr)
