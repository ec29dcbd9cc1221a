/* The agent's side of its Unix socket: the peer's uid (SO_PEERCRED, recorded by the kernel at
   connect(), which the client cannot change) and a read that takes the descriptors passed with
   the bytes (SCM_RIGHTS, at most CAPAGENT_MAX_FDS; more are closed). */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/socket.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/unixsupport.h>

#define CAPAGENT_MAX_FDS 8

value consort_agent_peer_uid(value fd)
{
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(Int_val(fd), SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
    uerror("getsockopt SO_PEERCRED", Nothing);
  if (len != sizeof cr) unix_error(EINVAL, "getsockopt SO_PEERCRED", Nothing);
  return Val_long(cr.uid);
}

/* recv(fd, buf + off, len) without waiting; returns (bytes read, descriptors received, whether
   more came): a descriptor beyond CAPAGENT_MAX_FDS is closed, and so is a truncated control
   message's (MSG_CTRUNC). */
value consort_agent_recv(value fd, value buf, value off, value len)
{
  CAMLparam4(fd, buf, off, len);
  CAMLlocal2(res, fds);
  union {
    char buf[CMSG_SPACE(sizeof(int) * CAPAGENT_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct msghdr mh;
  struct iovec iov;
  struct cmsghdr *ch;
  int got[CAPAGENT_MAX_FDS + 1];
  int ngot = 0, i, m;
  ssize_t n;
  size_t l = Long_val(len);
  char tmp[4096];
  if (l > sizeof tmp) l = sizeof tmp;
  if (Long_val(off) < 0 || Long_val(off) + l > caml_string_length(buf))
    caml_invalid_argument("consort_agent_recv");
  memset(&mh, 0, sizeof mh);
  iov.iov_base = tmp;
  iov.iov_len = l;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof u.buf;
  n = recvmsg(Int_val(fd), &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) uerror("recvmsg", Nothing);
  for (ch = CMSG_FIRSTHDR(&mh); ch != NULL; ch = CMSG_NXTHDR(&mh, ch))
    if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS) {
      m = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (i = 0; i < m; i++) {
        int d;
        memcpy(&d, CMSG_DATA(ch) + i * sizeof(int), sizeof(int));
        if (ngot < CAPAGENT_MAX_FDS) got[ngot++] = d;
        else {
          close(d);
          ngot = CAPAGENT_MAX_FDS + 1;
        }
      }
    }
  if (mh.msg_flags & MSG_CTRUNC) ngot = CAPAGENT_MAX_FDS + 1;
  memcpy(Bytes_val(buf) + Long_val(off), tmp, n);
  {
    int k = ngot > CAPAGENT_MAX_FDS ? CAPAGENT_MAX_FDS : ngot;
    if (k == 0) fds = Atom(0);
    else fds = caml_alloc_tuple(k);
    for (i = 0; i < k; i++) Store_field(fds, i, Val_int(got[i]));
  }
  res = caml_alloc_tuple(3);
  Store_field(res, 0, Val_long(n));
  Store_field(res, 1, fds);
  Store_field(res, 2, Val_bool(ngot > CAPAGENT_MAX_FDS));
  CAMLreturn(res);
}

/* send(fd, s) with the descriptors fds attached (SCM_RIGHTS, at most CAPAGENT_MAX_FDS): the
   client's side, for OCaml callers. Returns the bytes sent. */
value consort_agent_send(value fd, value s, value fds)
{
  CAMLparam3(fd, s, fds);
  union {
    char buf[CMSG_SPACE(sizeof(int) * CAPAGENT_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct msghdr mh;
  struct iovec iov;
  struct cmsghdr *ch;
  mlsize_t k = Wosize_val(fds), i;
  ssize_t n;
  int d;
  if (k > CAPAGENT_MAX_FDS) caml_invalid_argument("consort_agent_send");
  memset(&mh, 0, sizeof mh);
  memset(&u, 0, sizeof u);
  iov.iov_base = (void *)String_val(s);
  iov.iov_len = caml_string_length(s);
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (k > 0) {
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * k);
    ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof(int) * k);
    for (i = 0; i < k; i++) {
      d = Int_val(Field(fds, i));
      memcpy(CMSG_DATA(ch) + i * sizeof(int), &d, sizeof(int));
    }
  }
  n = sendmsg(Int_val(fd), &mh, MSG_NOSIGNAL);
  if (n < 0) uerror("sendmsg", Nothing);
  CAMLreturn(Val_long(n));
}

/* The listening socket systemd passed (socket activation: LISTEN_FDS, the first descriptor, 3):
   checked to be a Unix stream socket that listens, made close-on-exec. Raises Unix_error
   otherwise (ENOTSOCK, EINVAL). */
value consort_agent_inherited(value fd)
{
  int d = Int_val(fd), v;
  socklen_t len = sizeof v;
  if (getsockopt(d, SOL_SOCKET, SO_DOMAIN, &v, &len) != 0) uerror("getsockopt SO_DOMAIN", Nothing);
  if (v != AF_UNIX) unix_error(EINVAL, "not a Unix socket", Nothing);
  len = sizeof v;
  if (getsockopt(d, SOL_SOCKET, SO_TYPE, &v, &len) != 0) uerror("getsockopt SO_TYPE", Nothing);
  if (v != SOCK_STREAM) unix_error(EINVAL, "not a stream socket", Nothing);
  len = sizeof v;
  if (getsockopt(d, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) != 0)
    uerror("getsockopt SO_ACCEPTCONN", Nothing);
  if (!v) unix_error(EINVAL, "not listening", Nothing);
  if (fcntl(d, F_SETFD, FD_CLOEXEC) != 0) uerror("fcntl", Nothing);
  return fd;
}
