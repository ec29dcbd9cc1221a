/* The credentials of the peer of a connected Unix stream socket, for
   consortd's allow-list: SO_PEERCRED (the process that connected: pid, uid,
   gid) and SO_PEERGROUPS (its supplementary groups, Linux 4.13 and later;
   none where the kernel lacks it). The kernel records them at connect(),
   so a client cannot change them afterwards. */

#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/socket.h>

#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/unixsupport.h>

/* The most supplementary groups read (the kernel's NGROUPS_MAX is 65536). */
#define CONSORTD_MAX_GROUPS 65536

value consortd_peercred(value fd)
{
  CAMLparam1(fd);
  CAMLlocal1(res);
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(Int_val(fd), SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
    uerror("getsockopt SO_PEERCRED", Nothing);
  if (len != sizeof cr)
    unix_error(EINVAL, "getsockopt SO_PEERCRED", Nothing);
  res = caml_alloc_tuple(3);
  Store_field(res, 0, Val_long(cr.pid));
  Store_field(res, 1, Val_long(cr.uid));
  Store_field(res, 2, Val_long(cr.gid));
  CAMLreturn(res);
}

value consortd_peergroups(value fd)
{
  CAMLparam1(fd);
  CAMLlocal1(res);
#ifdef SO_PEERGROUPS
  socklen_t len = 64 * sizeof(gid_t);
  gid_t *g = NULL;
  for (;;) {
    gid_t *ng = realloc(g, len);
    if (ng == NULL) {
      free(g);
      unix_error(ENOMEM, "getsockopt SO_PEERGROUPS", Nothing);
    }
    g = ng;
    socklen_t got = len;
    if (getsockopt(Int_val(fd), SOL_SOCKET, SO_PEERGROUPS, g, &got) == 0) {
      len = got;
      break;
    }
    if (errno == ERANGE && got > len && got <= CONSORTD_MAX_GROUPS * sizeof(gid_t)) {
      len = got;
      continue;
    }
    free(g);
    if (errno == ENOPROTOOPT || errno == EINVAL)
      CAMLreturn(Atom(0));
    uerror("getsockopt SO_PEERGROUPS", Nothing);
  }
  size_t n = len / sizeof(gid_t);
  if (n == 0) {
    free(g);
    CAMLreturn(Atom(0));
  }
  res = caml_alloc(n, 0);
  for (size_t i = 0; i < n; i++)
    Store_field(res, i, Val_long(g[i]));
  free(g);
  CAMLreturn(res);
#else
  (void)fd;
  CAMLreturn(Atom(0));
#endif
}
