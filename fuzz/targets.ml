(* Shared checks for the fuzz targets. *)

open Consort

(* [codec name c]: any bytes decode to a value or an error, never an
   exception; a value re-encodes to exactly the bytes it came from (every
   codec is canonical), and its size is what [Codec.size] says. *)
let codec name c =
  Crowbar.add_test ~name:("codec " ^ name) [ Crowbar.bytes ] (fun s ->
      (match Codec.decode c (Cstruct.of_string s) 0 with Ok _ | Error _ -> ());
      match Codec.decode_string c s with
      | Error _ -> ()
      | Ok v ->
          let s' = Codec.encode_string c v in
          Crowbar.check_eq ~pp:(fun ppf s -> Fmt.pf ppf "%S" s) s s';
          Crowbar.check_eq ~pp:Fmt.int (String.length s) (Codec.size c v))

(* [codec_tagged name c tags]: the same, with inputs that start with one
   of the codec's tags half of the time, so the search gets past the first
   byte at once. *)
let codec_tagged name c tags =
  codec name c;
  let tag = Crowbar.choose (List.map (fun t -> Crowbar.const (String.make 1 (Char.chr t))) tags) in
  Crowbar.add_test
    ~name:("codec " ^ name ^ " (tagged)")
    [ tag; Crowbar.bytes ]
    (fun t s ->
      let s = t ^ s in
      match Codec.decode_string c s with
      | Error _ -> ()
      | Ok v -> Crowbar.check_eq ~pp:(fun ppf s -> Fmt.pf ppf "%S" s) s (Codec.encode_string c v))

(* [total name f]: [f] on any bytes returns, whatever it returns. *)
let total name f = Crowbar.add_test ~name [ Crowbar.bytes ] (fun s -> ignore (f s))
