/* System calls for Consort's UDP transport: batched receive (recvmmsg),
   scatter-gather send (sendmsg, sendmmsg), socket buffers and IPv4
   multicast options.

   Every call here is made on a non-blocking socket, so the runtime lock is
   kept: no OCaml value can move while a pointer into it is in use, because
   nothing here allocates between taking the pointer and the system call.

   Addresses cross the boundary as one OCaml int, (ipv4 << 16) | port, with
   the IPv4 address in host byte order. */

#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>

#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/fail.h>
#include <caml/bigarray.h>
#include <caml/unixsupport.h>
#include <caml/signals.h>

#define CONSORT_MAX_IOV 64
#define CONSORT_MAX_MSGS 64

/* Results for errors that the caller handles without an exception. */
#define CONSORT_WOULD_BLOCK (-1) /* EAGAIN, EWOULDBLOCK, ENOBUFS */
#define CONSORT_REFUSED (-2)     /* ECONNREFUSED: an earlier ICMP error */
#define CONSORT_TOO_BIG (-3)     /* EMSGSIZE */

static void sockaddr_of_int(struct sockaddr_in *sa, intnat a)
{
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_addr.s_addr = htonl((uint32_t)((a >> 16) & 0xffffffff));
  sa->sin_port = htons((uint16_t)(a & 0xffff));
}

static intnat int_of_sockaddr(const struct sockaddr_in *sa)
{
  return ((intnat)ntohl(sa->sin_addr.s_addr) << 16) | (intnat)ntohs(sa->sin_port);
}

static int send_errno_result(int err, const char *name)
{
  switch (err) {
  case EAGAIN:
#if EWOULDBLOCK != EAGAIN
  case EWOULDBLOCK:
#endif
  case ENOBUFS:
    return CONSORT_WOULD_BLOCK;
  case ECONNREFUSED:
    return CONSORT_REFUSED;
  case EMSGSIZE:
    return CONSORT_TOO_BIG;
  default:
    unix_error(err, (char *)name, Nothing);
  }
  return 0; /* not reached */
}

/* A scatter-gather list, the OCaml record
   { hdr : bytes; hoff : int; hlen : int;
     bufs : Cstruct.buffer array; offs : int array; lens : int array; n : int }.
   Fills [iov] and returns the number of entries. */
static int fill_iov(value sgl, struct iovec *iov)
{
  value hdr = Field(sgl, 0);
  intnat hoff = Long_val(Field(sgl, 1));
  intnat hlen = Long_val(Field(sgl, 2));
  value bufs = Field(sgl, 3), offs = Field(sgl, 4), lens = Field(sgl, 5);
  intnat n = Long_val(Field(sgl, 6));
  int k = 0;
  intnat i;

  if (n < 0 || n > CONSORT_MAX_IOV - 1 || (mlsize_t)n > Wosize_val(bufs)
      || (mlsize_t)n > Wosize_val(offs) || (mlsize_t)n > Wosize_val(lens))
    caml_invalid_argument("consort_udp: bad scatter-gather list");
  if (hoff < 0 || hlen < 0 || (uintnat)(hoff + hlen) > caml_string_length(hdr))
    caml_invalid_argument("consort_udp: header outside its buffer");
  if (hlen > 0) {
    iov[k].iov_base = (char *)Bytes_val(hdr) + hoff;
    iov[k].iov_len = (size_t)hlen;
    k++;
  }
  for (i = 0; i < n; i++) {
    value ba = Field(bufs, i);
    intnat off = Long_val(Field(offs, i));
    intnat len = Long_val(Field(lens, i));
    if (off < 0 || len < 0 || off + len > Caml_ba_array_val(ba)->dim[0])
      caml_invalid_argument("consort_udp: piece outside its buffer");
    iov[k].iov_base = (char *)Caml_ba_data_val(ba) + off;
    iov[k].iov_len = (size_t)len;
    k++;
  }
  return k;
}

/* [sendmsg fd sgl dst] is the number of bytes sent, or a negative
   CONSORT_ code. */
CAMLprim value consort_udp_sendmsg(value fd, value sgl, value dst)
{
  struct iovec iov[CONSORT_MAX_IOV];
  struct sockaddr_in sa;
  struct msghdr mh;
  ssize_t r;

  memset(&mh, 0, sizeof mh);
  sockaddr_of_int(&sa, Long_val(dst));
  mh.msg_name = &sa;
  mh.msg_namelen = sizeof sa;
  mh.msg_iov = iov;
  mh.msg_iovlen = (size_t)fill_iov(sgl, iov);
  do {
    r = sendmsg(Int_val(fd), &mh, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Val_int(send_errno_result(errno, "sendmsg"));
  return Val_long(r);
}

/* [sendmmsg fd sgl dsts start count] sends the same datagram to
   dsts.(start) .. dsts.(start + count - 1) and is how many were sent
   (at least one), or a negative CONSORT_ code if the first failed. */
CAMLprim value consort_udp_sendmmsg(value fd, value sgl, value dsts, value vstart,
                                    value vcount)
{
  struct iovec iov[CONSORT_MAX_IOV];
  struct sockaddr_in sa[CONSORT_MAX_MSGS];
  struct mmsghdr mm[CONSORT_MAX_MSGS];
  intnat start = Long_val(vstart), count = Long_val(vcount), i;
  int niov, r;

  if (start < 0 || count < 1 || count > CONSORT_MAX_MSGS
      || (mlsize_t)(start + count) > Wosize_val(dsts))
    caml_invalid_argument("consort_udp_sendmmsg: bad range");
  niov = fill_iov(sgl, iov);
  memset(mm, 0, sizeof(struct mmsghdr) * (size_t)count);
  for (i = 0; i < count; i++) {
    sockaddr_of_int(&sa[i], Long_val(Field(dsts, start + i)));
    mm[i].msg_hdr.msg_name = &sa[i];
    mm[i].msg_hdr.msg_namelen = sizeof sa[i];
    mm[i].msg_hdr.msg_iov = iov;
    mm[i].msg_hdr.msg_iovlen = (size_t)niov;
  }
  do {
    r = sendmmsg(Int_val(fd), mm, (unsigned int)count, MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Val_int(send_errno_result(errno, "sendmmsg"));
  return Val_int(r);
}

/* [recvmmsg fd buf slot nslots out] receives up to [nslots] datagrams,
   the i-th into bytes [i * slot, (i + 1) * slot) of [buf]. For each,
   out.(2i) is its length (-1 if it was truncated) and out.(2i+1) its
   source address; out.(2 nslots) is the socket's count of datagrams the
   kernel dropped for want of buffer space (SO_RXQ_OVFL, modulo 2^32), or
   -1 if no datagram carried it. The result is the number received, 0 if
   none was waiting. */
CAMLprim value consort_udp_recvmmsg(value fd, value buf, value vslot, value vnslots,
                                    value out)
{
  struct iovec iov[CONSORT_MAX_MSGS];
  struct sockaddr_in sa[CONSORT_MAX_MSGS];
  struct mmsghdr mm[CONSORT_MAX_MSGS];
  union {
    char buf[CMSG_SPACE(sizeof(uint32_t))];
    struct cmsghdr align;
  } ctl[CONSORT_MAX_MSGS];
  intnat slot = Long_val(vslot), nslots = Long_val(vnslots), i;
  intnat overflow = -1;
  char *base = (char *)Caml_ba_data_val(buf);
  int r, tries = 0;

  if (slot < 1 || nslots < 1 || nslots > CONSORT_MAX_MSGS
      || slot * nslots > Caml_ba_array_val(buf)->dim[0]
      || (mlsize_t)(2 * nslots + 1) > Wosize_val(out))
    caml_invalid_argument("consort_udp_recvmmsg: bad buffer");
  memset(mm, 0, sizeof(struct mmsghdr) * (size_t)nslots);
  for (i = 0; i < nslots; i++) {
    iov[i].iov_base = base + i * slot;
    iov[i].iov_len = (size_t)slot;
    mm[i].msg_hdr.msg_name = &sa[i];
    mm[i].msg_hdr.msg_namelen = sizeof sa[i];
    mm[i].msg_hdr.msg_iov = &iov[i];
    mm[i].msg_hdr.msg_iovlen = 1;
    mm[i].msg_hdr.msg_control = ctl[i].buf;
    mm[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
  }
  for (;;) {
    r = recvmmsg(Int_val(fd), mm, (unsigned int)nslots, MSG_DONTWAIT, NULL);
    if (r >= 0) break;
    if (errno == EINTR) continue;
    /* A pending ICMP error is reported once; the data behind it is still
       there. */
    if (errno == ECONNREFUSED && ++tries < 4) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED) return Val_int(0);
    uerror("recvmmsg", Nothing);
  }
  for (i = 0; i < r; i++) {
    intnat len = (intnat)mm[i].msg_len;
    intnat src = 0;
    struct cmsghdr *cm;
    for (cm = CMSG_FIRSTHDR(&mm[i].msg_hdr); cm != NULL; cm = CMSG_NXTHDR(&mm[i].msg_hdr, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL
          && cm->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
        uint32_t n;
        memcpy(&n, CMSG_DATA(cm), sizeof n);
        overflow = (intnat)n;
      }
    if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) len = -1;
    if (mm[i].msg_hdr.msg_namelen >= sizeof(struct sockaddr_in)
        && sa[i].sin_family == AF_INET)
      src = int_of_sockaddr(&sa[i]);
    else
      len = -1;
    Store_field(out, 2 * i, Val_long(len));
    Store_field(out, 2 * i + 1, Val_long(src));
  }
  Store_field(out, 2 * nslots, Val_long(overflow));
  return Val_int(r);
}

/* [recvmmsg_into fd bufs offs slot nslots out] is [recvmmsg] with the i-th
   datagram received into bytes [offs.(i), offs.(i) + slot) of [bufs.(i)]
   (each a buffer of its own, so that a datagram can be handed up where it
   landed); [out] as above. */
static value recvmmsg_into(value fd, value bufs, value offs, value vslot, value vnslots,
                           value out, int wait)
{
  struct iovec iov[CONSORT_MAX_MSGS];
  struct sockaddr_in sa[CONSORT_MAX_MSGS];
  struct mmsghdr mm[CONSORT_MAX_MSGS];
  union {
    char buf[CMSG_SPACE(sizeof(uint32_t))];
    struct cmsghdr align;
  } ctl[CONSORT_MAX_MSGS];
  intnat slot = Long_val(vslot), nslots = Long_val(vnslots), i;
  intnat overflow = -1;
  int r, tries = 0;

  if (slot < 1 || nslots < 1 || nslots > CONSORT_MAX_MSGS
      || (mlsize_t)nslots > Wosize_val(bufs) || (mlsize_t)nslots > Wosize_val(offs)
      || (mlsize_t)(2 * nslots + 1) > Wosize_val(out))
    caml_invalid_argument("consort_udp_recvmmsg_into: bad buffers");
  memset(mm, 0, sizeof(struct mmsghdr) * (size_t)nslots);
  for (i = 0; i < nslots; i++) {
    value b = Field(bufs, i);
    intnat off = Long_val(Field(offs, i));
    if (off < 0 || off + slot > Caml_ba_array_val(b)->dim[0])
      caml_invalid_argument("consort_udp_recvmmsg_into: slot outside its buffer");
    iov[i].iov_base = (char *)Caml_ba_data_val(b) + off;
    iov[i].iov_len = (size_t)slot;
    mm[i].msg_hdr.msg_name = &sa[i];
    mm[i].msg_hdr.msg_namelen = sizeof sa[i];
    mm[i].msg_hdr.msg_iov = &iov[i];
    mm[i].msg_hdr.msg_iovlen = 1;
    mm[i].msg_hdr.msg_control = ctl[i].buf;
    mm[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
  }
  for (;;) {
    if (wait) {
      /* Blocks until a datagram comes or the socket's receive timeout
         (SO_RCVTIMEO) passes; a signal ends the wait, so that its OCaml
         handler runs at once. */
      int sfd = Int_val(fd), err;
      caml_enter_blocking_section();
      r = recvmmsg(sfd, mm, (unsigned int)nslots, MSG_WAITFORONE, NULL);
      err = errno;
      caml_leave_blocking_section();
      errno = err;
      if (r < 0 && errno == EINTR) return Val_int(0);
    }
    else
      r = recvmmsg(Int_val(fd), mm, (unsigned int)nslots, MSG_DONTWAIT, NULL);
    if (r >= 0) break;
    if (errno == EINTR) continue;
    if (errno == ECONNREFUSED && ++tries < 4) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED) return Val_int(0);
    uerror("recvmmsg", Nothing);
  }
  for (i = 0; i < r; i++) {
    intnat len = (intnat)mm[i].msg_len;
    intnat src = 0;
    struct cmsghdr *cm;
    for (cm = CMSG_FIRSTHDR(&mm[i].msg_hdr); cm != NULL; cm = CMSG_NXTHDR(&mm[i].msg_hdr, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SO_RXQ_OVFL
          && cm->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
        uint32_t n;
        memcpy(&n, CMSG_DATA(cm), sizeof n);
        overflow = (intnat)n;
      }
    if (mm[i].msg_hdr.msg_flags & MSG_TRUNC) len = -1;
    if (mm[i].msg_hdr.msg_namelen >= sizeof(struct sockaddr_in)
        && sa[i].sin_family == AF_INET)
      src = int_of_sockaddr(&sa[i]);
    else
      len = -1;
    Store_field(out, 2 * i, Val_long(len));
    Store_field(out, 2 * i + 1, Val_long(src));
  }
  Store_field(out, 2 * nslots, Val_long(overflow));
  return Val_int(r);
}

CAMLprim value consort_udp_recvmmsg_into(value fd, value bufs, value offs, value vslot,
                                         value vnslots, value out)
{
  return recvmmsg_into(fd, bufs, offs, vslot, vnslots, out, 0);
}

CAMLprim value consort_udp_recvmmsg_into_byte(value *argv, int argn)
{
  (void)argn;
  return consort_udp_recvmmsg_into(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5]);
}

/* The same, waiting for the first datagram at most as long as the socket's
   receive timeout; the socket must be in blocking mode (every other call
   on it says MSG_DONTWAIT). 0 if none came. */
CAMLprim value consort_udp_recvmmsg_into_wait(value fd, value bufs, value offs, value vslot,
                                              value vnslots, value out)
{
  return recvmmsg_into(fd, bufs, offs, vslot, vnslots, out, 1);
}

CAMLprim value consort_udp_recvmmsg_into_wait_byte(value *argv, int argn)
{
  (void)argn;
  return consort_udp_recvmmsg_into_wait(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5]);
}

/* [set_buffer fd rcv size] asks for a socket buffer of [size] bytes (past
   the system limit when privileged) and is the size the kernel granted. */
CAMLprim value consort_udp_set_buffer(value fd, value rcv, value vsize)
{
  int size = Int_val(vsize), got = 0;
  socklen_t len = sizeof got;
  int force = Bool_val(rcv) ? SO_RCVBUFFORCE : SO_SNDBUFFORCE;
  int plain = Bool_val(rcv) ? SO_RCVBUF : SO_SNDBUF;

  if (setsockopt(Int_val(fd), SOL_SOCKET, force, &size, sizeof size) < 0
      && setsockopt(Int_val(fd), SOL_SOCKET, plain, &size, sizeof size) < 0)
    uerror("setsockopt", Nothing);
  if (getsockopt(Int_val(fd), SOL_SOCKET, plain, &got, &len) < 0)
    uerror("getsockopt", Nothing);
  return Val_int(got);
}

/* [count_overflow fd] asks the kernel to report, with each datagram, how
   many it dropped on this socket for want of buffer space. */
CAMLprim value consort_udp_count_overflow(value fd)
{
  int one = 1;
  if (setsockopt(Int_val(fd), SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one) < 0)
    uerror("setsockopt(SO_RXQ_OVFL)", Nothing);
  return Val_unit;
}

/* [mcast_setup fd iface ttl loop] sets the interface (an IPv4 address in
   host order, 0 for the default), TTL and loopback of multicast sends. */
CAMLprim value consort_udp_mcast_setup(value fd, value iface, value ttl, value loop)
{
  struct in_addr ia;
  int t = Int_val(ttl), l = Bool_val(loop) ? 1 : 0;

  if (Long_val(iface) != 0) {
    ia.s_addr = htonl((uint32_t)Long_val(iface));
    if (setsockopt(Int_val(fd), IPPROTO_IP, IP_MULTICAST_IF, &ia, sizeof ia) < 0)
      uerror("setsockopt(IP_MULTICAST_IF)", Nothing);
  }
  if (setsockopt(Int_val(fd), IPPROTO_IP, IP_MULTICAST_TTL, &t, sizeof t) < 0)
    uerror("setsockopt(IP_MULTICAST_TTL)", Nothing);
  if (setsockopt(Int_val(fd), IPPROTO_IP, IP_MULTICAST_LOOP, &l, sizeof l) < 0)
    uerror("setsockopt(IP_MULTICAST_LOOP)", Nothing);
  return Val_unit;
}

/* [mcast_join fd group iface] joins the IPv4 group on the interface with
   address [iface] (0 for the default). */
CAMLprim value consort_udp_mcast_join(value fd, value group, value iface)
{
  struct ip_mreq mr;

  memset(&mr, 0, sizeof mr);
  mr.imr_multiaddr.s_addr = htonl((uint32_t)Long_val(group));
  mr.imr_interface.s_addr = htonl((uint32_t)Long_val(iface));
  if (setsockopt(Int_val(fd), IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr) < 0)
    uerror("setsockopt(IP_ADD_MEMBERSHIP)", Nothing);
  return Val_unit;
}

/* Readiness for the event loop, with epoll. */

#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <caml/signals.h>

#define CONSORT_MAX_EVENTS 64

CAMLprim value consort_epoll_create(value unit)
{
  int fd = epoll_create1(EPOLL_CLOEXEC);
  (void)unit;
  if (fd < 0) uerror("epoll_create1", Nothing);
  return Val_int(fd);
}

/* [epoll_ctl epfd fd add] starts (add) or stops watching [fd] for input. */
CAMLprim value consort_epoll_ctl(value epfd, value fd, value add)
{
  struct epoll_event ev;
  int r;

  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.fd = Int_val(fd);
  r = epoll_ctl(Int_val(epfd), Bool_val(add) ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, Int_val(fd), &ev);
  if (r < 0) uerror("epoll_ctl", Nothing);
  return Val_unit;
}

/* The loop's timer descriptor: a monotonic timerfd, watched edge-triggered
   (never read: arming it again clears it), so that a wait for a deadline
   does not arm and cancel a kernel timer on every wait. */
CAMLprim value consort_timerfd_create(value epfd)
{
  struct epoll_event ev;
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) uerror("timerfd_create", Nothing);
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = fd;
  if (epoll_ctl(Int_val(epfd), EPOLL_CTL_ADD, fd, &ev) < 0) {
    int err = errno;
    close(fd);
    unix_error(err, "epoll_ctl", Nothing);
  }
  return Val_int(fd);
}

/* [timerfd_arm fd ns]: the timer expires once, [ns] nanoseconds from now
   (at least 1). */
CAMLprim value consort_timerfd_arm(value fd, value vns)
{
  struct itimerspec its;
  intnat ns = Long_val(vns);
  if (ns < 1) ns = 1;
  memset(&its, 0, sizeof its);
  its.it_value.tv_sec = (time_t)(ns / 1000000000);
  its.it_value.tv_nsec = (long)(ns % 1000000000);
  if (timerfd_settime(Int_val(fd), 0, &its, NULL) < 0) uerror("timerfd_settime", Nothing);
  return Val_unit;
}

/* [epoll_wait epfd out timeout_ns] waits at most [timeout_ns] (forever if
   negative; rounded up to whole milliseconds) and writes the descriptors
   ready for input into [out]; the result is their number, 0 on timeout or
   interruption by a signal. The runtime lock is released while waiting. */
CAMLprim value consort_epoll_wait(value epfd, value out, value timeout_ns)
{
  CAMLparam3(epfd, out, timeout_ns);
  struct epoll_event ev[CONSORT_MAX_EVENTS];
  intnat ns = Long_val(timeout_ns);
  int fd = Int_val(epfd), max, ms, r, err, i;

  max = (int)(Wosize_val(out) < CONSORT_MAX_EVENTS ? Wosize_val(out) : CONSORT_MAX_EVENTS);
  if (max < 1) caml_invalid_argument("consort_epoll_wait: empty result array");
  if (ns < 0)
    ms = -1;
  else if (ns >= (intnat)INT32_MAX * 1000000)
    ms = INT32_MAX;
  else
    ms = (int)((ns + 999999) / 1000000);
  caml_enter_blocking_section();
  r = epoll_wait(fd, ev, max, ms);
  err = errno;
  caml_leave_blocking_section();
  if (r < 0) {
    if (err == EINTR) CAMLreturn(Val_int(0));
    unix_error(err, "epoll_wait", Nothing);
  }
  for (i = 0; i < r; i++) Store_field(out, i, Val_int(ev[i].data.fd));
  CAMLreturn(Val_int(r));
}

/* [sched_yield ()]: lets another task runnable on this CPU run first (a
   polling loop that yields keeps its CPU from idling without starving a
   process placed beside it). */
CAMLprim value consort_sched_yield(value unit)
{
  (void)unit;
  sched_yield();
  return Val_unit;
}

/* The monotonic clock in nanoseconds (CLOCK_MONOTONIC, as Mtime_clock on
   Linux), as an untagged integer: no boxed int64 for each reading. */
CAMLprim intnat consort_clock_ns(value unit)
{
  struct timespec ts;
  (void)unit;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (intnat)ts.tv_sec * 1000000000 + (intnat)ts.tv_nsec;
}

CAMLprim value consort_clock_ns_byte(value unit)
{
  return Val_long(consort_clock_ns(unit));
}
