(** Boot declarations: the services of one host, in a small line-based file.

    {v
    # comments and blank lines are ignored
    service fs
      run consort cap fs serve --data /var/lib/consort/fs --bind 127.0.0.1:7700
    service proc
      run consort cap proc serve --data /var/lib/consort/proc --locate 127.0.0.1:7700
      after fs
    service hello
      run consort cap exec -n $proc cap1:... world
      capability none
      cap root=$dir
      restart on-failure
    v}

    A service's lines (indented or not) follow its [service NAME] line:

    - [run PROGRAM ARG...] (required): the command; words are separated by spaces, ["..."] quotes
      one with spaces; [$NAME] is replaced by the capability of service NAME (which then is a
      dependency), [$$] is [$].
    - [after NAME...]: dependencies; the service starts once they are up.
    - [cap NAME=VALUE]: a capability for the service's environment ([CONSORT_CAP_NAME],
      {!Consort_capenv}); VALUE is [cap1:...] or [$SERVICE].
    - [env VAR=VALUE]: an environment variable.
    - [capability stdout|none]: [stdout] (default): the service prints [server CAP] as its first
      line (as Consort's servers do), and is polled with [std_status] on that capability; [none]: it
      has no capability and is up while it runs.
    - [restart always|on-failure|never] (default [always]).
    - [backoff MIN MAX]: seconds before a restart, doubling from MIN up to MAX (default 0.5 30).
    - [at ADDR:PORT]: where the service answers (the boot server locates its port there to poll it;
      also [--locate] and [CONSORT_LOCATE]).
    - [poll SECONDS] (default 2), [start-timeout SECONDS] (default 10).

    Names are 1-32 characters of [a-z0-9_-]. Bounds: 64 services, 256 arguments, lines of 4096
    bytes, files of 256 KiB. Errors are one line: [FILE:LINE: what]. *)

type restart = Always | On_failure | Never
type piece = Text of string | Service of string

type word = piece list
(** literal text and service references, in order *)

type service = {
  name : string;
  run : word list;
  after : string list;  (** explicit and implied (by [$NAME]) dependencies *)
  caps : (string * word) list;
  env : (string * string) list;
  capability : bool;
  restart : restart;
  backoff : float * float;
  poll : float;
  start_timeout : float;
  at : string list;
  line : int;
}

val parse : ?file:string -> string -> (service list, string) result
(** [parse text]: the services in dependency order (each after those it depends on; otherwise in the
    file's order), or the first error: a syntax error, an unknown or duplicate service, a cyclic
    declaration ("cyclic dependencies: a -> b -> a"). *)

val load : string -> (service list, string) result

val expand : (string -> string option) -> word -> (string, string) result
(** [expand cap_of w]: the word with each service reference replaced. *)
