(** {!Consort.Endpoint}, under its older name. *)

include module type of struct
  include Consort.Endpoint
end
