(** The one table of [make bench-peers], and the same as JSON.

    It reads a results directory written by [bench-peers.sh] (README.md beside this file): the
    machine and versions ([meta.tsv]), the [result] lines of [udp_raw], [cpg_bench] and [JgBench]
    ([results.txt]), the JSON lines of Consort's own bench commands, the stack cost
    ([stack-cost.json]) and what could not run ([skipped.tsv]). Nothing is measured here: a missing
    figure is printed as missing. *)

val parse_result : string -> (string * string) list option
(** [parse_result "result a=1 b=x"] is [Some [("a","1"); ("b","x")]]; [None] for a line that does
    not start with ["result"]. *)

val run : ?svg:string -> dir:string -> out:string option -> unit -> (unit, string) result
(** [run ?svg ~dir ~out ()] prints the table of [dir] on stdout, writes it as JSON to [out] and its
    throughput rows as an SVG chart to [svg] (one bar of payload MB/s per row, each bar's figures in
    its [data-] attributes, and the targets). An error names the directory or the file and what is
    wrong with it. *)
