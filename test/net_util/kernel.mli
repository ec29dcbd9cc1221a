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

val namespace : ns:string -> tap:string -> kernel_ip:string -> ?kernel_ip6:string -> unit -> unit
(** [namespace ~ns ~tap ~kernel_ip ?kernel_ip6 ()] makes the network namespace [ns], moves the TAP
    device [tap] (our stack's other end) into it and gives it [kernel_ip]/24 (and [kernel_ip6]/64,
    IPv6 otherwise off), up, with the namespace's loopback. The test fails if a command does. *)

val remove_namespace : ns:string -> tap:string -> unit
(** Removes [ns] and [tap], whatever of them is there. *)
