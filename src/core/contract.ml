type t = { name : string; doc : string }

let v name ~doc = { name; doc }
let name t = t.name
let doc t = t.doc
let equal a b = String.equal a.name b.name
let pp ppf t = Fmt.string ppf t.name
let net = v "net" ~doc:"raw datagrams from a transport"
let datagram = v "datagram" ~doc:"best-effort casts and sends between ranks, garbage filtered"
let reliable_send = v "reliable-send" ~doc:"exactly-once FIFO point-to-point messages"
let reliable_cast = v "reliable-cast" ~doc:"exactly-once FIFO casts for a fixed membership"
