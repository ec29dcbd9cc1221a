(** The [consort] executable the benchmarks start (servers, members, peers).

    [consort bench ...] runs [consort-bench], setting [CONSORT_EXE] to its own path; run directly,
    [consort-bench] starts the [consort] beside it, else the one on [PATH]. *)

val consort : unit -> string
(** The path of [consort]: [$CONSORT_EXE] when set (and not empty), else [consort] beside this
    executable if there is one, else the first [consort] on [PATH], else ["consort"] (starting it
    then fails with the system's error). *)
