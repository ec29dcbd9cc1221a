(** Garbage collection as in Amoeba: objects have a lifetime; a round touches every object reachable
    from the root directory, then ages every server's objects, so that an object no directory
    reaches loses one round of its lifetime each round and is destroyed when it has none left, while
    a reachable one is given its whole lifetime again each round and never goes.

    A round that cannot touch everything reachable (a server that fails, a directory whose rows
    cannot be read) ages nothing: ageing after an incomplete marking could destroy a reachable
    object. A server that fails to age is only left out of this round's ageing. Servers keep
    lifetimes so that a crash can only give objects more time (the file server's are in memory and
    start whole; the directory server's are replicated with its state). *)

module Cap = Consort_cap.Cap
module Port = Consort_cap.Port

type touch_error =
  [ `Dangling of string
    (** the object is gone or the capability is bad: a dead reference, not a failure *)
  | `Failed of string  (** the server could not be asked: the round stops *) ]

type server = {
  port : Port.t;
  touch : Cap.t -> (unit, touch_error) result;  (** [std_touch] *)
  age : unit -> (unit, string) result;  (** [std_age] with the server's capability *)
}

type report = {
  touched : int;
  dangling : int;
  foreign : int;  (** reachable objects of servers this collector does not age *)
  directories : int;
  aged : int;  (** servers aged *)
  not_aged : (Port.t * string) list;
}

val pp_report : report Fmt.t

val round :
  ?max_objects:int ->
  refs:(Cap.t -> (Cap.t list, string) result option) ->
  servers:server list ->
  Cap.t ->
  (report, string) result
(** [round ~refs ~servers root]: marks from [root], breadth first, each object once; [refs c] is
    [None] when [c] is not a directory, else the capabilities its rows hold ([Dir.Refs]). Then ages
    every server. [Error]: the round was abandoned before any ageing. *)
