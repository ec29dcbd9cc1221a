(** The control socket of a running member: a Unix socket where [consort status],
    [consort counters], [consort cast] and [consort send] (or any program) ask one line and read one
    line of JSON.

    {v
    status                  {"group":G,"me":ID,"view":VID,"ltime":N,"coordinator":ID,"members":[ID,...],"rank":N,"blocked":B,"flow_blocked":B}
    status-all              {"group":G,"view":VID,"members":[{"me":ID,"status":STATUS} or {"me":ID,"error":WHY},...]}
    counters                {"LAYER":{"COUNTER":N,...},...}
    cast TEXT               {"ok":true} or {"error":REASON}
    send ID TEXT            {"ok":true} or {"error":REASON}
    suspect ID[,ID...]      {"ok":true}
    leave                   {"ok":true}
    group NAME REQUEST      REQUEST, if this member is in group NAME (as a daemon's control socket)
    anything else           {"error":"unknown request ..."}
    v}

    Versioned by its words: a request it does not know is answered with an error, never ignored. *)

type handler = {
  status : unit -> Yojson.Safe.t;
  counters : unit -> (string * (string * int) list) list;
  cast : string -> (unit, string) result;
  send : string -> string -> (unit, string) result;
  suspect : string list -> unit;
  leave : unit -> unit;
  status_all : (Yojson.Safe.t -> unit) -> unit;
      (** every member's status, asked through the group; the answer is given to the function once
      *)
}

val answer : handler -> string -> string
(** One request line to its answer line. *)

val serve : Consort_engine.Loop.t -> string -> handler -> (Serve.t, string) result
(** [serve loop path handler] listens on the Unix socket [path] (mode 0600; refused if another
    server answers there), at most 16 clients, 1 MiB a request. *)

val counters_json : (string * (string * int) list) list -> Yojson.Safe.t

val status_fields :
  group:string ->
  me:string ->
  view:string ->
  ltime:int ->
  coordinator:string ->
  members:string list ->
  rank:int ->
  blocked:bool ->
  flow_blocked:bool ->
  (string * Yojson.Safe.t) list
(** The fields of a member's [status] answer, in its order: what [consort member]'s control socket,
    consortd's (each member's, with its client's number and handle added) and the web console's
    GROUP objects begin with. *)
