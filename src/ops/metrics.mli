(** Counters in the Prometheus text exposition format (version 0.0.4), served over HTTP by {!serve}:
    what an operator's Prometheus scrapes, or [curl http://ADDR:PORT/metrics] shows. *)

type sample = {
  name : string;
  help : string;
  kind : [ `Counter | `Gauge ];
  labels : (string * string) list;
  value : float;
}

val render : sample list -> string
(** The exposition text: one [# HELP] and [# TYPE] line per metric name (in the order of first
    appearance), then its samples. Label values are escaped (backslash, double quote, newline);
    names are made valid (characters outside [[a-zA-Z0-9_:]] become [_]). *)

val of_counters :
  labels:(string * string) list -> (string * (string * int) list) list -> sample list
(** [of_counters ~labels counters] turns a stack's counters, by layer (as [Group.counters] gives
    them), into samples of [consort_layer_counter{layer=...,counter=...}] with [labels] added. *)

val serve :
  ?max_connections:int ->
  Consort_engine.Loop.t ->
  Unix.sockaddr ->
  (unit -> sample list) ->
  (Serve.t, string) result
(** [serve loop addr samples] answers [GET /metrics] with [render (samples ())]; [GET /] with a line
    naming [/metrics]; any other path 404, any other method 405. Bounded as {!Serve.listen} is (8
    KiB per request, 10 s idle). *)
