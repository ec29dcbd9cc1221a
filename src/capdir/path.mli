(** Paths across directories ([/home/alice/notes]): each component is looked up in the directory the
    previous one named, through the capability that lookup gave (so rights narrow along the way), on
    whatever server holds it. *)

val split : string -> string list
(** The components of a path; empty ones and [.] are skipped. *)

val parent : string -> (string * string) option
(** [parent "a/b/c"] is [Some ("a/b", "c")]; [None] for the root. *)

type 'e error =
  [ `Lookup of string * 'e  (** the lookup of this prefix failed *)
  | `Withheld of string
  | `Empty of string ]

val pp_error : 'e Fmt.t -> 'e error Fmt.t

val resolve :
  lookup:(Consort_cap.Cap.t -> string -> (Dir.entry list, 'e) result) ->
  Consort_cap.Cap.t ->
  string ->
  (Consort_cap.Cap.t, 'e error) result
(** [resolve ~lookup root path] follows [path] from [root], taking at each step the first capability
    of the row that this directory could narrow. *)
