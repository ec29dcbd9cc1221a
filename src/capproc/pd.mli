(** Process descriptors: what a process server needs to start a program (Amoeba's process
    descriptor, as VAMNET wraps bytecode in one).

    The binary form is versioned and bounded; decoding is total (every error is a [Error msg] of one
    line) and never uses [Marshal]:

    {v
    "CPD" version(1 byte = 1)
    arch      : u8 length, bytes           ("ocaml-bytecode")
    program   : 40 bytes (a cap1 capability)
    limits    : cpu_ms u32, memory u32 (KiB), run_ms u32   (0: the server's default)
    args      : u16 count, then each: u16 length, bytes
    caps      : u8 count, then each: u8 name length, name, 40-byte capability
    hints     : u8 count, then each: u8 length, "ADDR:PORT"
    v}

    Bounds: at most {!max_args} arguments, all together at most {!max_args_bytes} bytes; at most
    {!max_caps} named capabilities, names of 1-32 characters in [a-z0-9_.-]; at most 8 hints of at
    most 64 bytes; the whole descriptor at most {!max_size} bytes. *)

open Consort_cap

type limits = { cpu_ms : int; memory_kib : int; run_ms : int }

type t = {
  arch : string;
  program : Cap.t;
  args : string list;  (** [argv.(1)] onwards *)
  caps : (string * Cap.t) list;
      (** the capability environment: [stdin], [stdout], [stderr], [root], and any other name *)
  limits : limits;
  hints : string list;  (** where the environment's ports may be located, [ADDR:PORT] *)
}

val arch_bytecode : string
(** ["ocaml-bytecode"] *)

val no_limits : limits
val max_size : int
val max_args : int
val max_args_bytes : int
val max_caps : int
val valid_name : string -> bool

val encode : t -> (string, string) result
(** [Error] if [t] breaks a bound. *)

val decode : string -> (t, string) result
val cap : t -> string -> Cap.t option
