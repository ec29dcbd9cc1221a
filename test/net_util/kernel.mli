(** The kernel's side of a test: a Python script run in the test's network namespace while our stack
    runs in the loop. *)

val spawn :
  ns:string ->
  Consort_engine.Loop.t ->
  default_timeout:float ->
  string ->
  ?timeout:float ->
  until:(unit -> bool) ->
  unit ->
  string
(** [spawn ~ns loop ~default_timeout script] starts [script] under python3 in the namespace [ns]
    now; the function it gives runs [loop] until the script has exited and [until ()] holds, then
    gives what the script wrote. The test fails, with that text, if the script fails or runs past
    [timeout] seconds ([default_timeout] unless given; it is killed). *)

val field : string -> string -> string
(** [field text key]: the rest of the line of [text] that starts with [key], trimmed; the test fails
    if there is none. *)
