(** The file server's request handler: pure over a {!Consort_capfs.Store.t}, so the same code
    answers requests from the RPC, the simulator or a test.

    Every request's capability is checked against the object's secret kept in the store: a check
    that does not match (forged, altered, revoked, or for another port) is [STD_CAPBAD], too few
    rights [STD_DENIED], an object that does not exist (destroyed, aged away, never made)
    [STD_NOTFOUND]. *)

type t

val create : Consort_capfs.Store.t -> Consort_cap.Port.t -> t
val store : t -> Consort_capfs.Store.t
val port : t -> Consort_cap.Port.t

val server_cap : t -> Consort_cap.Cap.t
(** The owner capability of the server object (object 0): it allows creating files, and (admin)
    [std_age]. *)

val file_cap : t -> Consort_capfs.Store.obj -> Consort_cap.Cap.t option
(** The owner capability of a file. *)

val handle : t -> Consort_cap.Header.t -> string -> Consort_cap.Header.t * string
(** [handle t hdr data] carries out one request (see {!Fs_proto}) and is its reply. It never raises.
*)

val status_of_error : Consort_capfs.Store.error -> Consort_cap.Status.t
