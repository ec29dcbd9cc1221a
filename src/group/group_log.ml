let src = Logs.Src.create "consort.group" ~doc:"Process groups: views, joins, merges"

module Log = (val Logs.src_log src : Logs.LOG)
