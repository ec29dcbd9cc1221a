(* Fuzz targets for the process descriptor, the boot declarations and the
   virtual circuit host: every input a stranger (or a user's file) gives
   them is refused or taken, never an exception, and nothing grows. *)

open Consort_cap
open Consort_crypto
module Pd = Consort_capproc.Pd
module Vc = Consort_capvc.Vc
module P = Consort_capvc.Vc_proto

let register () =
  (* Total and canonical: a decoded descriptor encodes to the same bytes. *)
  Crowbar.add_test ~name:"process descriptor" [ Crowbar.bytes ] (fun s ->
      match Pd.decode s with
      | Error _ -> ()
      | Ok pd -> (
          match Pd.encode pd with
          | Ok s' -> Crowbar.check_eq ~pp:Fmt.(fun ppf s -> pf ppf "%S" s) s s'
          | Error e -> Crowbar.failf "a decoded descriptor does not encode: %s" e));
  Crowbar.add_test ~name:"process descriptor (tagged)" [ Crowbar.bytes ] (fun s ->
      ignore (Pd.decode ("CPD\001" ^ s)));
  Crowbar.add_test ~name:"boot declarations" [ Crowbar.bytes ] (fun s ->
      ignore (Consort_capboot.Decl.parse s));
  (* A circuit host fed any requests on its ends (valid capabilities,
     commands of the circuit, any numbers and data): each answered once at
     most, never an exception, never more buffered than its capacity. *)
  let g = Crypto.deterministic "fuzz-vc" in
  let port = Port.Key.port (Port.Key.generate ~g ()) in
  let config = { Vc.default_config with capacity = 1024 } in
  let request =
    Crowbar.(
      map
        [ range 7; bool; int; int; int; bytes ]
        (fun cmd which offset size extra data ->
          (cmd, which, offset land 0xffff, size land 0xffff, extra, data)))
  in
  Crowbar.add_test ~name:"virtual circuit host"
    [ Crowbar.list request ]
    (fun reqs ->
      let host = Vc.create_host ~config ~g port in
      let c = Result.get_ok (Vc.create host ~now:0) in
      let now = ref 0 in
      List.iter
        (fun (cmd, which, offset, size, extra, data) ->
          let command =
            [|
              P.vc_write;
              P.vc_read;
              P.vc_close;
              P.vc_intr;
              P.vc_hangup;
              Std.std_destroy;
              Std.std_touch;
            |].(cmd)
          in
          let h = Header.request ~offset ~size ~extra (if which then c.Vc.a else c.Vc.b) command in
          let answers = ref 0 in
          Vc.handle host ~now:!now h data (fun _ -> incr answers);
          if !answers > 1 then Crowbar.fail "answered twice";
          now := !now + 50_000_000;
          Vc.tick host ~now:!now;
          let st = Vc.stats host in
          if st.buffered > 2 * config.capacity then Crowbar.failf "%d bytes buffered" st.buffered;
          if st.held > 4 then Crowbar.failf "%d requests held" st.held)
        reqs)
