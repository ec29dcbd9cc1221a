(** Member processes ([consort member]) as the join and failover benchmarks drive them: started at
    once, their views read from their standard output as the lines arrive, checked against their
    logs. *)

type t = { proc : Proc.t; addr : string; log : string }

val start :
  exe:string ->
  dir:string ->
  group:string ->
  ?params:string ->
  ?props:string ->
  ?extra:string list ->
  ?seed:int ->
  peers:string list ->
  int ->
  string ->
  t
(** [start ~exe ~dir ~group ~peers i addr] runs member [i] of [group] at [addr], told of [peers],
    logging to a file in [dir]; with [props] and [extra] arguments (such as [--key FILE]). *)

val parse_view : string -> (string * string list) option
(** [parse_view line] is the view id and members of a ["view ..."] line of [consort member]'s
    output. *)

val first_view : t -> after:float -> (string list -> bool) -> (float * string list) option
(** [first_view m ~after p] is the first view line read after time [after] whose members satisfy
    [p], with the time it was read. *)

val last_logged_view : t -> (string * string list) option
(** [last_logged_view m] is the last view in [m]'s log file. *)

val eid_addr : string -> string
(** [eid_addr id] is the address part of a member id (["IP:PORT#INC"]). *)

val stop : t list -> unit
(** [stop ms] kills the processes by PID and reaps them. *)
