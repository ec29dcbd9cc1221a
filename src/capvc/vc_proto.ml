let vc_write = 1201
let vc_read = 1202
let vc_close = 1203
let vc_intr = 1204
let vc_hangup = 1205
let eof_flag = 1
let max_chunk = 60 * 1024
let hungup : Consort_cap.Status.t = `Other 120

let command_name c =
  if c = vc_write then "vc_write"
  else if c = vc_read then "vc_read"
  else if c = vc_close then "vc_close"
  else if c = vc_intr then "vc_intr"
  else if c = vc_hangup then "vc_hangup"
  else Printf.sprintf "command %d" c
