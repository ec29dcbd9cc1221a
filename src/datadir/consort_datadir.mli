(** A data directory's identity: which store it holds, for which service, and an id minted once.

    A server that keeps state in a directory ([consort cap fs serve --data],
    [consort cap dir serve --data]) writes, at its first start, a file [service-identity] there
    (beside, never in place of, a store's own files: the key-value store keeps an [identity] of its
    own when it is given one):

    {v
    consort-data 1
    kind capfs
    service 5a0c...e1
    id 3f9d...07
    v}

    and checks it at every later start: a directory of another kind or another service (a directory
    replica started on another directory service's data, a file server on a directory's) is refused
    with one line that names both, before anything in it is read or changed. The [id] (128 random
    bits) is minted once, when the identity is first written, and never changes: it tells two data
    directories of one service apart. *)

type t = { kind : string; service : string; id : string }

val file : string -> string
(** [file dir] is [dir/service-identity]. *)

val pp : Format.formatter -> t -> unit
(** [kind KIND, service SERVICE, id ID]. *)

val check :
  ?random:(int -> string) ->
  ?looks_like:(string -> bool) ->
  ?ignore:string list ->
  kind:string ->
  service:(unit -> (string, string) result) ->
  string ->
  (t, string) result
(** [check ~kind ~service dir]: the identity of [dir], written first if it has none.

    - [dir] missing or empty: it is created (mode 0700) and its identity minted and made durable
      (written to a temporary file, fsynced, renamed, the directory fsynced).
    - [dir] with a [service-identity]: [Ok] if its kind and service are these; [Error] naming both
      if not, or if the file does not parse.
    - [dir] not empty, with no [service-identity]: a store written before identities existed is
      adopted (its identity written) when [looks_like dir] says it has this kind's layout (default:
      never); anything else is refused, so that a wrong directory is never taken for a store.

    [service ()] is asked only once the kind is known to match (or the directory is new), so that
    what it does (load or make a key file) never touches another kind's directory. Names in [ignore]
    (a key file kept there) do not make a directory non-empty. [random n] gives [n] random bytes
    (default [/dev/urandom]). Errors are one line. *)
