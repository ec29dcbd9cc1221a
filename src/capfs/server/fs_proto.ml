let bs_create = 2001
let bs_read = 2002
let bs_size = 2003
let bs_modify = 2004
let bs_insert = 2005
let bs_delete = 2006
let bs_commit = 2007
let bs_revoke = 2008
let commit_flag = 1
let safety_flag = 2
let flags ~commit ~safe = (if commit then commit_flag else 0) lor if safe then safety_flag else 0
let max_read = 4 lsl 20

let names =
  [
    (Consort_cap.Std.std_age, "STD_AGE");
    (Consort_cap.Std.std_destroy, "STD_DESTROY");
    (Consort_cap.Std.std_info, "STD_INFO");
    (Consort_cap.Std.std_restrict, "STD_RESTRICT");
    (Consort_cap.Std.std_status, "STD_STATUS");
    (Consort_cap.Std.std_touch, "STD_TOUCH");
    (bs_create, "BS_CREATE");
    (bs_read, "BS_READ");
    (bs_size, "BS_SIZE");
    (bs_modify, "BS_MODIFY");
    (bs_insert, "BS_INSERT");
    (bs_delete, "BS_DELETE");
    (bs_commit, "BS_COMMIT");
    (bs_revoke, "BS_REVOKE");
  ]

let command_name c = match List.assoc_opt c names with Some n -> n | None -> string_of_int c
