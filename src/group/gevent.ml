type Consort.Event.up_ctl += Suspect of { ranks : int list; reason : string }
type Consort.Event.dn_ctl += Suspect_request of { ranks : int list; reason : string }

let pp_ranks = Fmt.(list ~sep:comma int)

let () =
  Consort.Event.register_up_ctl_printer (function
    | Suspect { ranks; reason } ->
        Some (fun ppf -> Fmt.pf ppf "suspect([%a]: %s)" pp_ranks ranks reason)
    | _ -> None);
  Consort.Event.register_dn_ctl_printer (function
    | Suspect_request { ranks; reason } ->
        Some (fun ppf -> Fmt.pf ppf "suspect-request([%a]: %s)" pp_ranks ranks reason)
    | _ -> None)
