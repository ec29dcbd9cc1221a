(** Where control sockets are found without being named: a member started without [--control] opens
    one in the user's runtime directory, and [consort status] with no [--control] asks every socket
    there and in the system's directory (where [dist/consortd.service] puts consortd's).

    {v
    $XDG_RUNTIME_DIR/consort/member-GROUP-PID.ctl   a member of a user (the directory 0700)
    /run/consort/member-GROUP-PID.ctl               a member run by root without XDG_RUNTIME_DIR
    /run/consort/consortd.ctl                       consortd under its systemd unit
    v}

    Another local user's sockets are never asked (unless by root): a directory or a socket owned by
    someone else is skipped with a note. *)

val system_dir : string
(** [/run/consort]. *)

val user_dir : unit -> string option
(** [$XDG_RUNTIME_DIR/consort], when [XDG_RUNTIME_DIR] is set to an absolute path that exists. *)

val member_dir : unit -> string option
(** Where a member puts its socket: {!user_dir}, else {!system_dir} for root, else none. *)

val prepare : string -> (unit, string) result
(** [prepare dir] makes [dir] (mode 0700; its parent must exist) or checks the one there: a
    directory owned by this user (or root's, for root) that no one else may enter. *)

val member_path : string -> group:string -> string
(** [member_path dir ~group]: [dir/member-GROUP-PID.ctl], the group's name kept to letters, digits,
    [-], [_] and [.] (others become [_]), at most 40 of them. *)

val sweep : string -> int
(** [sweep dir] removes the sockets [member-GROUP-PID.ctl] of this user in [dir] whose process is
    gone (a member killed by SIGKILL leaves its socket); the number removed. *)

type found =
  | Socket of string  (** a socket of this user (or any, for root) *)
  | Skipped of string * string  (** a path and why it was not asked *)

val scan : string list -> found list
(** The sockets ([*.ctl]) of the directories, in order of name; a directory that does not exist is
    passed over in silence. *)

val dirs : unit -> string list
(** The directories [consort status] looks in: {!user_dir} then {!system_dir}. *)
