(* The extended virtual synchrony feature of the group runtime (property
   Evs): transitional views, told to an application that joined with
   ~transitional. *)

open Consort

type transitional = { ending : string; next : string; survivors : string array }

let pp_transitional ppf t =
  Fmt.pf ppf "transitional view of %s into %s: [%s]" t.ending t.next
    (String.concat ", " (Array.to_list t.survivors))

type t = { on_transitional : (transitional -> unit) option }

let create on_transitional = { on_transitional }

(* Extended virtual synchrony: the members that go on from the old view
   into this one hear of it before what the old view still delivers at its
   end (held safe casts), which is then safe only among them. *)
let view_change t ~(ending : View.t option) ~next ~members =
  match (t.on_transitional, ending) with
  | Some f, Some v ->
      let survivors =
        Array.of_list (List.filter (fun e -> Array.mem e members) (Array.to_list v.members))
      in
      f { ending = v.id; next; survivors }
  | _ -> ()

(* A member that leaves goes on with no one: what its view still delivers
   at its end is safe only with respect to itself. *)
let leave t ~(ending : View.t option) ~me =
  match (t.on_transitional, ending) with
  | Some f, Some v -> f { ending = v.id; next = ""; survivors = [| me |] }
  | _ -> ()
