(** Histories of client operations as text, for the linearizability checker: one operation per line,
    fields separated by tabs:

    {v
CLIENT  CALL  RETURN  get|put|del|cas  KEY [ARGS...]  =>  ok|value V|not-found|cas-failed|?
    v}

    [CALL] and [RETURN] are times (any unit, one clock for all clients); [RETURN] is [-1] and the
    response [?] when the outcome is unknown. Keys and values must not hold tabs or newlines. *)

val line : client:int -> call:int -> return:int option -> Op.t -> Op.response option -> string
(** [line ...] is one line, without its newline. [Error] responses are written as unknown outcomes.
*)

val parse : string -> (Consort_spec.Linearizable.event, string) result

val read : string -> (Consort_spec.Linearizable.event list, string) result
(** [read file]: every line of [file] (blank lines and lines starting with [#] skipped); [Error]
    names the first bad line. *)
