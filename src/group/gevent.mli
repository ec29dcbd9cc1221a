(** Control events of the group communication layers.

    They extend {!Consort.Event.up_ctl} and {!Consort.Event.dn_ctl}; layers
    pass on any control event they do not handle. *)

type Consort.Event.up_ctl +=
  | Suspect of { ranks : int list; reason : string }
        (** going up: these ranks of the current view are believed to have
            failed (from a failure detector, or shared by another member) *)

type Consort.Event.dn_ctl +=
  | Suspect_request of { ranks : int list; reason : string }
        (** going down: the application or a membership layer asks for
            these ranks to be suspected by the whole group *)
