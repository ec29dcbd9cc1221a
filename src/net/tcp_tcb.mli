(** A TCP instance's records and the helpers its parts share: the instance, its listeners,
    connections and TIME-WAIT records; time and upcalls; sequence-space and segment-size arithmetic;
    the connection table; creating a connection. The records are open to the other parts of TCP
    ({!Tcp_output}, {!Tcp_time_wait}, {!Tcp_timers}, {!Tcp_listener}, {!Tcp}), not to its users. *)

module type S = Tcp_tcb_intf.S

module Log : Logs.LOG
(** The log source of TCP ("consort.tcp"). *)

module Make
    (Lower : Tcp_types.LOWER)
    (P :
      Tcp_types.PARAMS
        with type host = Lower.host
         and type lower_address = Lower.address
         and type lower_pattern = Lower.address_pattern) :
  S
    with type host = Lower.host
     and type lower = Lower.t
     and type lower_connection = Lower.connection
     and type lower_status = Lower.status
