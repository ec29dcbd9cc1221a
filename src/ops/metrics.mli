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

type totals
(** A stack's counters kept monotonic for the life of the process: layers above Bottom count from 0
    in each view's stack, so a value lower than the last one seen starts a new stack, and what the
    old stack had counted is kept. Observe the counters at each block (just before a view change) as
    well as at each scrape, so that little is missed between the last scrape and the change. *)

val totals : unit -> totals
val observe : totals -> (string * (string * int) list) list -> unit

val gauges : string list
(** The names of the counters that are levels (queues, windows, rounds), exported as gauges. *)

val is_gauge : string -> bool

val of_counters :
  totals:totals ->
  labels:(string * string) list ->
  (string * (string * int) list) list ->
  sample list
(** [of_counters ~totals ~labels counters] turns a stack's counters, by layer (as [Group.counters]
    gives them), into samples with [labels] added: [consort_layer_events_total{layer,counter}] (a
    counter, monotonic through [totals]) and, for the {!gauges}, [consort_layer_gauge{layer,gauge}].
*)

val member_labels : group:string -> string -> (string * string) list
(** [member_labels ~group id]: [group] and [member], the member's address without its incarnation,
    so that a restart continues the same series. *)

val member_info : group:string -> string -> sample
(** [consort_member_info{group,member,id} 1]: the incarnation, as an info metric. *)

val serve :
  ?max_connections:int ->
  Consort_engine.Loop.t ->
  Unix.sockaddr ->
  (unit -> sample list) ->
  (Serve.t, string) result
(** [serve loop addr samples] answers [GET /metrics] with [render (samples ())]; [GET /] with a line
    naming [/metrics]; any other path 404, any other method 405. Bounded as {!Serve.listen} is (8
    KiB per request, 10 s idle). *)
