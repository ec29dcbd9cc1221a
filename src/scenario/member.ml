open Consort
module Loop = Consort_engine.Loop
module Udp = Consort_engine.Udp
module G = Consort_group.Group.Make (Udp)
module Log = Consort_spec.Log

module In_channel_all = struct
  let read file =
    let ic = open_in_bin file in
    Fun.protect ~finally:(fun () -> close_in ic) (fun () -> really_input_string ic (in_channel_length ic))
end

let default_ports = List.init 16 (fun i -> 7400 + i)
let default_peers = List.map (Printf.sprintf "127.0.0.1:%d") default_ports

let digest s = String.sub (Sha256.to_hex (Sha256.string s)) 0 16

type config = {
  group : string;
  props : Consort_group.Properties.t list;
  bind : string option;
  peers : string list;
  log : string option;
  params : Params.t;
  quiet : bool;
  input : Unix.file_descr option;
  seed : int;
  drop_file : string option;
  discovery : string option;
}

(* Binds the first free port of the default range, or the given address. *)
(* A line of standard input is cast; a refusal is said on standard error,
   and the line is not sent. *)
let cast_line g line =
  match G.cast g line with
  | Ok () -> ()
  | Error e -> Fmt.epr "consort member: cast refused: %a@." Consort_group.Group.pp_error e

let join loop cfg layers cb ~on_sent =
  let try_addr addr =
    G.join ~params:cfg.params ~peers:cfg.peers ~seed:cfg.seed ~on_sent ?discovery:cfg.discovery
      ~heal:(List.mem Consort_group.Properties.Heal cfg.props) ~layers loop ~group:cfg.group ~addr cb
  in
  match cfg.bind with
  | Some addr -> try_addr addr
  | None ->
      let rec go = function
        | [] -> Error "no free port in 127.0.0.1:7400-7415; give one with --bind"
        | p :: rest -> (
            match try_addr p with
            | Ok g -> Ok g
            | Error e when String.length e >= 13 && String.sub e 0 13 = "address in us" -> go rest
            | Error _ -> go rest)
      in
      go default_peers

let run cfg =
  match Consort_group.Properties.layers cfg.props with
  | Error e -> Error e
  | Ok layers -> (
      let loop = Loop.create () in
      let log_oc =
        match cfg.log with
        | None -> Ok None
        | Some f -> ( try Ok (Some (open_out f)) with Sys_error e -> Error e)
      in
      match log_oc with
      | Error e -> Error ("cannot open the log: " ^ e)
      | Ok log_oc -> (
          let write e =
            match log_oc with
            | Some oc ->
                output_string oc (Log.to_line e);
                output_char oc '\n';
                flush oc
            | None -> ()
          in
          let say fmt = Printf.ksprintf (fun s -> if not cfg.quiet then (print_endline s; flush stdout)) fmt in
          let self = ref "" and g_ref = ref None and exited = ref false in
          let vid () = match !g_ref with Some g -> (G.view g).Consort_group.Group.vid | None -> "" in
          let deliver kind ~origin s =
            say "%s from %s: %s" (match kind with `Cast -> "cast" | `Send -> "send") origin s;
            write
              (Log.Deliver
                 { me = !self; view = vid (); from = origin; kind; len = String.length s; digest = digest s })
          in
          let cb =
            {
              Consort_group.Group.view =
                (fun v ->
                  self := v.members.(v.rank);
                  say "view %s: %s (rank %d; joined [%s], left [%s])" v.vid
                    (String.concat " " (Array.to_list v.members))
                    v.rank (String.concat " " v.joined) (String.concat " " v.left);
                  write (Log.View { me = !self; view = v.vid; members = Array.to_list v.members }));
              cast = deliver `Cast;
              send = deliver `Send;
              block = (fun () -> ());
              flow = (fun blocked -> if blocked then say "flow control: sending paused" else say "flow control: sending resumed");
              exit =
                (fun () ->
                  exited := true;
                  say "left the group";
                  write (Log.Exit { me = !self }));
            }
          in
          let on_sent ~vid kind s =
            match kind with
            | `Cast -> write (Log.Cast { me = !self; view = vid; len = String.length s; digest = digest s })
            | `Send dst -> write (Log.Send { me = !self; view = vid; dst; len = String.length s; digest = digest s })
          in
          match join loop cfg layers cb ~on_sent with
          | Error e -> Error e
          | Ok g ->
              g_ref := Some g;
              say "member %s of group %s, stack %s" (G.me g) cfg.group (Stack.describe layers);
              let leaving = ref false in
              let leave () =
                if not !leaving then begin
                  leaving := true;
                  G.leave g
                end
              in
              let term = ref false in
              Sys.set_signal Sys.sigterm (Sys.Signal_handle (fun _ -> term := true));
              Sys.set_signal Sys.sigint (Sys.Signal_handle (fun _ -> term := true));
              let rec poll () =
                if !term then leave ();
                if not !exited then ignore (Loop.after loop (Time.of_ms 20) poll)
              in
              poll ();
              (* A test's partition: drop datagrams from the addresses
                 listed in the file, re-read as it changes. *)
              (match cfg.drop_file with
              | None -> ()
              | Some file ->
                  let last = ref "" in
                  let rec watch_file () =
                    let contents = try In_channel_all.read file with Sys_error _ -> "" in
                    if contents <> !last then begin
                      last := contents;
                      let blocked =
                        List.filter (( <> ) "") (List.map String.trim (String.split_on_char '\n' contents))
                      in
                      let filter =
                        if blocked = [] then None
                        else Some (fun ~src _ -> List.mem (Udp.address_to_string src) blocked)
                      in
                      say "dropping datagrams from [%s]" (String.concat " " blocked);
                      ignore (Udp.control (G.connection g) (Udp.Drop_filter filter))
                    end;
                    if not !exited then ignore (Loop.after loop (Time.of_ms 50) watch_file)
                  in
                  watch_file ());
              (* Standard input: each line is a cast; the end leaves. *)
              (match cfg.input with
              | None -> ()
              | Some fd ->
                  let buf = Buffer.create 256 and chunk = Bytes.create 65536 in
                  let rec lines () =
                    let s = Buffer.contents buf in
                    match String.index_opt s '\n' with
                    | Some i ->
                        let line = String.sub s 0 i in
                        Buffer.clear buf;
                        Buffer.add_string buf (String.sub s (i + 1) (String.length s - i - 1));
                        if line <> "" then cast_line g line;
                        lines ()
                    | None -> ()
                  in
                  Unix.set_nonblock fd;
                  Loop.watch loop fd (fun () ->
                      match Unix.read fd chunk 0 (Bytes.length chunk) with
                      | 0 ->
                          Loop.unwatch loop fd;
                          if Buffer.length buf > 0 then cast_line g (Buffer.contents buf);
                          Buffer.clear buf;
                          leave ()
                      | n ->
                          Buffer.add_subbytes buf chunk 0 n;
                          lines ()
                      | exception Unix.Unix_error ((Unix.EAGAIN | Unix.EWOULDBLOCK | Unix.EINTR), _, _) -> ()
                      | exception Unix.Unix_error (e, _, _) ->
                          Loop.unwatch loop fd;
                          say "standard input: %s; leaving" (Unix.error_message e);
                          leave ()));
              Loop.run loop ~until:(fun () -> !exited);
              Option.iter close_out log_oc;
              Ok ()))
