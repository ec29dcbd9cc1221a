type writer = { clock : Clock.t; oc : out_channel; hdr : Bytes.t; mutable frames : int }

let magic_ns = 0xa1b23c4d
let linktype_ethernet = 1
let snaplen = 65535

let of_channel ~clock oc =
  let h = Bytes.create 24 in
  Bytes.set_int32_le h 0 (Int32.of_int magic_ns);
  Bytes.set_uint16_le h 4 2;
  Bytes.set_uint16_le h 6 4;
  Bytes.set_int32_le h 8 0l;
  Bytes.set_int32_le h 12 0l;
  Bytes.set_int32_le h 16 (Int32.of_int snaplen);
  Bytes.set_int32_le h 20 (Int32.of_int linktype_ethernet);
  output_bytes oc h;
  { clock; oc; hdr = Bytes.create 16; frames = 0 }

let create ~clock path = of_channel ~clock (open_out_bin path)

let record w cs =
  let now = w.clock.now () in
  let n = Cstruct.length cs in
  let caplen = min n snaplen in
  Bytes.set_int32_le w.hdr 0 (Int32.of_int (now / 1_000_000_000));
  Bytes.set_int32_le w.hdr 4 (Int32.of_int (now mod 1_000_000_000));
  Bytes.set_int32_le w.hdr 8 (Int32.of_int caplen);
  Bytes.set_int32_le w.hdr 12 (Int32.of_int n);
  output_bytes w.oc w.hdr;
  output_string w.oc (Cstruct.to_string (Cstruct.sub cs 0 caplen));
  w.frames <- w.frames + 1

let close w = close_out w.oc
let frames w = w.frames

let wrap w inner =
  let d =
    Device.v
      ~name:(Device.name inner ^ "+pcap")
      ~mac:(Device.mac inner) ~mtu:(Device.mtu inner)
      ~send:(fun p ->
        record w (Packet.cstruct p);
        Device.send inner p)
      ~close:(fun () -> Device.close inner)
      ()
  in
  Device.set_receive inner (fun p ->
      record w (Packet.cstruct p);
      Device.deliver d p);
  d

module Reader = struct
  let read path =
    match open_in_bin path with
    | exception Sys_error e -> Error (`Msg e)
    | ic -> (
        let s =
          Fun.protect
            ~finally:(fun () -> close_in ic)
            (fun () -> really_input_string ic (in_channel_length ic))
        in
        let n = String.length s in
        let u32 off = Int32.to_int (String.get_int32_le s off) land 0xffff_ffff in
        if n < 24 then Error (`Msg "pcap: short file")
        else
          let scale =
            match u32 0 with 0xa1b23c4d -> Some 1 | 0xa1b2c3d4 -> Some 1000 | _ -> None
          in
          match scale with
          | None -> Error (`Msg "pcap: bad magic (or big-endian file)")
          | Some scale ->
              let rec go off acc =
                if off = n then Ok (List.rev acc)
                else if off + 16 > n then Error (`Msg "pcap: truncated record header")
                else
                  let sec = u32 off and frac = u32 (off + 4) and caplen = u32 (off + 8) in
                  if off + 16 + caplen > n then Error (`Msg "pcap: truncated record")
                  else
                    go
                      (off + 16 + caplen)
                      (((sec * 1_000_000_000) + (frac * scale), String.sub s (off + 16) caplen)
                      :: acc)
              in
              go 24 [])
end
