(* consort-exec SERVER PROGRAM ARGS...: consort cap exec, started without the rest of consort. *)

let () =
  (* A client that lives as long as its program and holds little: the major GC's work, spurred by
     the receive buffers (out-of-heap memory counts towards it), would be most of its CPU time at
     start. *)
  Gc.set { (Gc.get ()) with space_overhead = 1000; custom_major_ratio = 1000 };
  Consort_cli.main (Consort_capexec.exec_cmd ~name:"consort-exec" ~path:"cap exec")
