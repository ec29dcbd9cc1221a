(* Stacks bound to transports: {!Consort.Endpoint}, named here too. *)
include Consort.Endpoint
