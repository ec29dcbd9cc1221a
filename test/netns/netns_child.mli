(** A test's child process in a network namespace of its own (needs root and iproute2's [ip]). *)

val run : what:string -> ns:string -> limit:float -> unit
(** [run ~what ~ns ~limit] makes the network namespace [ns]-PID with its loopback up and carrying
    multicast, runs this test executable in it with the argument [--multicast-child], and removes
    the namespace. The test ([what], in the messages) fails when there is no [ip] command, when not
    root, when the child fails or is killed, or when it runs past [limit] seconds (then it is
    killed, and only it). *)
