type 'r t = {
  last : (int64, int * 'r) Hashtbl.t;
  order : int64 Queue.t; (* clients, oldest first *)
}

let create () = { last = Hashtbl.create 64; order = Queue.create () }
let clients t = Hashtbl.length t.last

let remember t ~max_clients client req r =
  if not (Hashtbl.mem t.last client) then begin
    while Hashtbl.length t.last >= max_clients && not (Queue.is_empty t.order) do
      Hashtbl.remove t.last (Queue.pop t.order)
    done;
    Queue.push client t.order
  end;
  Hashtbl.replace t.last client (req, r)

let apply t ~max_clients ~client ~req ~older f =
  match Hashtbl.find_opt t.last client with
  | Some (last, r) when last = req -> (r, false)
  | Some (last, _) when req < last ->
      (older (Printf.sprintf "request %d is older than this client's last, %d" req last), false)
  | _ ->
      let r = f () in
      remember t ~max_clients client req r;
      (r, true)

let codec response =
  let open Consort.Codec in
  map
    (fun t ->
      Queue.fold
        (fun acc c ->
          let req, r = Hashtbl.find t.last c in
          (c, req, r) :: acc)
        [] t.order
      |> List.rev)
    (fun cs ->
      let t = create () in
      List.iter
        (fun (c, req, r) ->
          Queue.push c t.order;
          Hashtbl.replace t.last c (req, r))
        cs;
      t)
    (list ~max:max_int (tup3 int64 varint response))
