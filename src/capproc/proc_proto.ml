let ps_exec = 1301
let ps_wait = 1302
let ps_signal = 1303

type kind = Exited | Signaled | Limit | Killed | Failed

let kind_to_int = function Exited -> 0 | Signaled -> 1 | Limit -> 2 | Killed -> 3 | Failed -> 4

let kind_of_int = function
  | 0 -> Some Exited
  | 1 -> Some Signaled
  | 2 -> Some Limit
  | 3 -> Some Killed
  | 4 -> Some Failed
  | _ -> None

let signals =
  [
    ("HUP", Sys.sighup);
    ("INT", Sys.sigint);
    ("QUIT", Sys.sigquit);
    ("KILL", Sys.sigkill);
    ("USR1", Sys.sigusr1);
    ("USR2", Sys.sigusr2);
    ("TERM", Sys.sigterm);
    ("STOP", Sys.sigstop);
    ("CONT", Sys.sigcont);
  ]

external signal_to_system : int -> int = "consort_proc_signal_to_system"
external signal_of_system : int -> int = "consort_proc_signal_of_system"

let signal_name s =
  let extra =
    [
      ("XCPU", Sys.sigxcpu);
      ("SEGV", Sys.sigsegv);
      ("ABRT", Sys.sigabrt);
      ("PIPE", Sys.sigpipe);
      ("BUS", Sys.sigbus);
      ("FPE", Sys.sigfpe);
      ("ILL", Sys.sigill);
    ]
  in
  match List.find_opt (fun (_, n) -> n = s) (signals @ extra) with
  | Some (name, _) -> "SIG" ^ name
  | None -> Printf.sprintf "signal %d" (signal_to_system s)

let command_name c =
  if c = ps_exec then "ps_exec"
  else if c = ps_wait then "ps_wait"
  else if c = ps_signal then "ps_signal"
  else Printf.sprintf "command %d" c
