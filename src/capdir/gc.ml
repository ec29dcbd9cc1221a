module Cap = Consort_cap.Cap
module Port = Consort_cap.Port

type touch_error = [ `Dangling of string | `Failed of string ]

type server = {
  port : Port.t;
  touch : Cap.t -> (unit, touch_error) result;
  age : unit -> (unit, string) result;
}

type report = {
  touched : int;
  dangling : int;
  foreign : int;
  directories : int;
  aged : int;
  not_aged : (Port.t * string) list;
}

let pp_report ppf r =
  Fmt.pf ppf
    "%d objects touched (%d directories), %d dangling, %d on servers not collected; %d servers aged"
    r.touched r.directories r.dangling r.foreign r.aged;
  List.iter (fun (p, e) -> Fmt.pf ppf "; %a not aged: %s" Port.pp p e) r.not_aged

module Seen = Set.Make (struct
  type t = string * int

  let compare = compare
end)

let round ?(max_objects = 10_000_000) ~refs ~servers root =
  let server_of (c : Cap.t) = List.find_opt (fun s -> Port.equal s.port c.port) servers in
  let q = Queue.create () in
  Queue.push root q;
  let rec mark seen ~touched ~dangling ~foreign ~directories =
    match Queue.take_opt q with
    | None -> Ok (touched, dangling, foreign, directories)
    | Some (c : Cap.t) -> (
        let key = (Port.to_raw c.port, c.obj) in
        if Seen.mem key seen then mark seen ~touched ~dangling ~foreign ~directories
        else if touched + dangling + foreign >= max_objects then
          Error (Printf.sprintf "over %d objects reachable: round abandoned" max_objects)
        else
          let seen = Seen.add key seen in
          match server_of c with
          | None -> mark seen ~touched ~dangling ~foreign:(foreign + 1) ~directories
          | Some s -> (
              match s.touch c with
              | Error (`Failed e) ->
                  Error (Fmt.str "touch of %a: %s: round abandoned, nothing aged" Cap.pp c e)
              | Error (`Dangling _) ->
                  mark seen ~touched ~dangling:(dangling + 1) ~foreign ~directories
              | Ok () -> (
                  match refs c with
                  | None -> mark seen ~touched:(touched + 1) ~dangling ~foreign ~directories
                  | Some (Error e) ->
                      Error (Fmt.str "rows of %a: %s: round abandoned, nothing aged" Cap.pp c e)
                  | Some (Ok children) ->
                      List.iter (fun c -> Queue.push c q) children;
                      mark seen ~touched:(touched + 1) ~dangling ~foreign
                        ~directories:(directories + 1))))
  in
  match mark Seen.empty ~touched:0 ~dangling:0 ~foreign:0 ~directories:0 with
  | Error e -> Error e
  | Ok (touched, dangling, foreign, directories) ->
      let not_aged =
        List.filter_map
          (fun s -> match s.age () with Ok () -> None | Error e -> Some (s.port, e))
          servers
      in
      Ok
        {
          touched;
          dangling;
          foreign;
          directories;
          aged = List.length servers - List.length not_aged;
          not_aged;
        }
