(** The file server's requests: command numbers (Amoeba's [bullet.h]) and flags. The standard
    operations ({!Consort_cap.Std}) are answered too.

    {v
    command       capability, rights     header in            data in   reply
    BS_CREATE     server, create         extra = flags        bytes     priv = the new file (owner)
    BS_READ       file, read             offset, size         -         bytes (at most size), size = their length
    BS_SIZE       file, read             -                    -         size
    BS_MODIFY     file, modify           offset, extra=flags  bytes     priv = the file changed (new if committed)
    BS_INSERT     file, modify           offset, extra=flags  bytes     as BS_MODIFY
    BS_DELETE     file, modify           offset, size, flags  -         as BS_MODIFY
    BS_COMMIT     file, modify           extra = flags        -         -
    BS_REVOKE     any object, all        -                    secret    priv = the new owner capability
    STD_DESTROY   file, destroy          -                    -         -
    STD_INFO      any                    -                    -         "- N bytes", "- uncommitted", or the server's name
    STD_RESTRICT  any                    offset = rights mask -         priv = the capability with fewer rights
    STD_TOUCH     any                    -                    -         - (an uncommitted file's idle time restarts)
    STD_AGE       any, admin             -                    -         - (idle uncommitted files are destroyed)
    STD_STATUS    any                    -                    -         a line of counters
    v}

    A BS_READ of an uncommitted file is refused with STD_NOTNOW.

    BS_REVOKE (not in Amoeba's Bullet server) gives a file, or the server itself (object 0: the
    capability that allows creating files), the 32 secret bytes the client chose: every capability
    made with the old secret fails from then on. The client chooses them so that a resent request is
    harmless: the request's capability no longer checks, but a request that names the object's
    current secret is answered as done (knowing the secret is more than holding the owner
    capability). *)

val bs_create : int
val bs_read : int
val bs_size : int
val bs_modify : int
val bs_insert : int
val bs_delete : int
val bs_commit : int
val bs_revoke : int

val commit_flag : int
(** BS_COMMIT, 1: commit the result. *)

val safety_flag : int
(** BS_SAFETY, 2: reply only once the committed file is on the disk. *)

val flags : commit:bool -> safe:bool -> int

val max_read : int
(** The largest read the server answers at once: 4 MiB. *)

val command_name : int -> string
