type kind = Requested | Silent | Unresponsive

type Consort.Event.up_ctl +=
  | Suspect of { ranks : int list; reason : string }
  | Flush_verdict of { coord : int; accept : bool }

type Consort.Event.dn_ctl +=
  | Suspect_request of { ranks : int list; reason : string }
  | Suspect_unresponsive of { ranks : int list; reason : string }
  | Accusation of { accuser : int; ranks : int list; reason : string; kind : kind }
  | Judge_flush of { coord : int; excluded : int list }

let pp_ranks = Fmt.(list ~sep:comma int)

let pp_kind ppf = function
  | Requested -> Fmt.string ppf "requested"
  | Silent -> Fmt.string ppf "silent"
  | Unresponsive -> Fmt.string ppf "unresponsive"

let () =
  Consort.Event.register_up_ctl_printer (function
    | Suspect { ranks; reason } ->
        Some (fun ppf -> Fmt.pf ppf "suspect([%a]: %s)" pp_ranks ranks reason)
    | Flush_verdict { coord; accept } ->
        Some (fun ppf -> Fmt.pf ppf "flush-verdict(%d: %b)" coord accept)
    | _ -> None);
  Consort.Event.register_dn_ctl_printer (function
    | Suspect_request { ranks; reason } ->
        Some (fun ppf -> Fmt.pf ppf "suspect-request([%a]: %s)" pp_ranks ranks reason)
    | Suspect_unresponsive { ranks; reason } ->
        Some (fun ppf -> Fmt.pf ppf "suspect-unresponsive([%a]: %s)" pp_ranks ranks reason)
    | Accusation { accuser; ranks; reason; kind } ->
        Some
          (fun ppf ->
            Fmt.pf ppf "accusation(%d suspects [%a], %a: %s)" accuser pp_ranks ranks pp_kind kind
              reason)
    | Judge_flush { coord; excluded } ->
        Some (fun ppf -> Fmt.pf ppf "judge-flush(%d excludes [%a])" coord pp_ranks excluded)
    | _ -> None)
