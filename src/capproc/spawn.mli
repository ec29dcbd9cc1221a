(** Starting a child (a C stub around fork and execve): its own process group, the three descriptors
    given as 0, 1 and 2 and no other, no core files, and optional limits. *)

val spawn :
  ?cpu_seconds:int ->
  ?address_space:int ->
  ?die_with_parent:int ->
  string ->
  string array ->
  string array ->
  Unix.file_descr * Unix.file_descr * Unix.file_descr ->
  int
(** [spawn prog argv env (stdin, stdout, stderr)] is the child's pid. [cpu_seconds]: RLIMIT_CPU
    (SIGXCPU, then SIGKILL a second later); [address_space]: RLIMIT_AS in bytes; [die_with_parent]:
    an OCaml signal number the child gets if this process dies. [prog] is a path, or a name looked
    up in [PATH].
    @raise Unix.Unix_error if it cannot fork or [prog] is not found. *)
