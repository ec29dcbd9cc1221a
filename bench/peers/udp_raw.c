/* Raw UDP on 127.0.0.1 in C, the floor under every group communication
 * system in `make bench-peers`.
 *
 *   udp_raw rtt  --count N --warmup W --size B --cpus A,B [--deadline S]
 *       16-byte (B) ping-pong between two processes pinned to CPUs A and B
 *       (same number: one CPU), blocking sockets, one datagram each way.
 *   udp_raw tput --count N --size B --receivers R [--deadline S]
 *       one sender process sends N datagrams of B bytes to each of R
 *       receiver processes in turn, with no flow control; each receiver
 *       counts what arrives (first to last datagram) and the order.
 *   udp_raw flow --count N --size B --senders S [--members M] [--min-seconds T]
 *                [--window W] [--rcvbuf BYTES] [--cpus A,B,...] [--deadline S]
 *       M member processes (3 by default), like the group rows: the first S
 *       of them each send N datagrams of B bytes (more, until T seconds have
 *       passed, with --min-seconds) to every other member, with sendmmsg,
 *       and every member receives with recvmmsg. A credit window keeps it
 *       lossless: a sender has at most W datagrams (computed from the
 *       receive buffer when W is 0) not yet returned as credit by each
 *       receiver, and a receiver returns credit (the count it consumed)
 *       every W/4 datagrams. Each datagram carries its sender and sequence
 *       number: every receiver counts what it got, what was lost (gaps and
 *       the tail, from the sender's end marker) and disorder. A member
 *       delivers its own datagrams as it sends them (as a group member
 *       delivers its own casts); its rate is what it delivered (its own and
 *       what it received) from its first to its last delivery, and the
 *       result's msgs_per_s is the slowest member's.
 *
 * The processes are forked here, pinned with sched_setaffinity, and ended by
 * PID (every one is bounded by --deadline). The result is one line of
 * key=value pairs on stdout, starting with "result". */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *m) {
  fprintf(stderr, "udp_raw: %s%s%s\n", m, errno ? ": " : "", errno ? strerror(errno) : "");
  exit(2);
}

static void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) die("sched_setaffinity");
}

/* A socket bound to 127.0.0.1 on a port the kernel picks. */
static int udp_socket(int rcvbuf, struct sockaddr_in *bound) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) die("bind");
  if (rcvbuf > 0) setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  socklen_t l = sizeof *bound;
  if (getsockname(s, (struct sockaddr *)bound, &l) != 0) die("getsockname");
  return s;
}

/* recv with a timeout in seconds; -1 on timeout. */
static ssize_t recv_within(int s, char *buf, size_t len, double timeout) {
  struct pollfd p = {.fd = s, .events = POLLIN};
  int ms = timeout <= 0 ? 0 : (int)(timeout * 1000) + 1;
  for (;;) {
    int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t n = recv(s, buf, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return n;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Children run under a deadline; the parent kills them by PID if late. */
static pid_t children[64];
static int nchildren;

static void reap(double deadline) {
  for (int i = 0; i < nchildren; i++) {
    int status;
    for (;;) {
      pid_t r = waitpid(children[i], &status, WNOHANG);
      if (r == children[i] || r < 0) break;
      if (now_s() > deadline) {
        kill(children[i], SIGKILL);
        waitpid(children[i], &status, 0);
        break;
      }
      usleep(2000);
    }
  }
  nchildren = 0;
}

static int rtt(int count, int warmup, int size, int cpu_a, int cpu_b, double deadline_s) {
  if (size < 8 || size > 60000) die("size between 8 and 60000");
  struct sockaddr_in a_addr, b_addr;
  int a = udp_socket(0, &a_addr), b = udp_socket(0, &b_addr);
  int fd[2];
  if (pipe(fd) != 0) die("pipe");
  double deadline = now_s() + deadline_s;
  pid_t pong = fork();
  if (pong < 0) die("fork");
  if (pong == 0) {
    close(a);
    close(fd[0]);
    close(fd[1]);
    pin(cpu_b);
    char buf[65536];
    for (;;) {
      ssize_t n = recv_within(b, buf, sizeof buf, deadline - now_s());
      if (n < 0) _exit(1);
      if (n == 4 && memcmp(buf, "stop", 4) == 0) _exit(0);
      if (sendto(b, buf, n, 0, (struct sockaddr *)&a_addr, sizeof a_addr) < 0) _exit(1);
    }
  }
  children[nchildren++] = pong;
  pid_t ping = fork();
  if (ping < 0) die("fork");
  if (ping == 0) {
    close(b);
    close(fd[0]);
    pin(cpu_a);
    char *msg = calloc(1, size), buf[65536];
    double *samples = calloc(count, sizeof(double));
    if (!msg || !samples) _exit(1);
    int lost = 0;
    for (int i = 0; i < warmup + count;) {
      if (now_s() > deadline) _exit(1);
      memcpy(msg, &i, sizeof i);
      double t0 = now_s();
      if (sendto(a, msg, size, 0, (struct sockaddr *)&b_addr, sizeof b_addr) < 0) _exit(1);
      ssize_t n;
      do n = recv_within(a, buf, sizeof buf, 0.2);
      while (n >= 0 && !(n == size && memcmp(buf, &i, sizeof i) == 0));
      if (n < 0) { /* lost on loopback (rare): send this one again */
        lost++;
        continue;
      }
      if (i >= warmup) samples[i - warmup] = (now_s() - t0) * 1e6;
      i++;
    }
    for (int k = 0; k < 3; k++) sendto(a, "stop", 4, 0, (struct sockaddr *)&b_addr, sizeof b_addr);
    double sum = 0;
    for (int i = 0; i < count; i++) sum += samples[i];
    qsort(samples, count, sizeof(double), cmp_double);
    int p99 = (int)(0.99 * (count - 1) + 0.5);
    dprintf(fd[1], "n=%d min_us=%.2f median_us=%.2f p99_us=%.2f mean_us=%.2f resent=%d\n", count, samples[0],
            count % 2 ? samples[count / 2] : (samples[count / 2 - 1] + samples[count / 2]) / 2, samples[p99],
            sum / count, lost);
    _exit(0);
  }
  children[nchildren++] = ping;
  close(fd[1]);
  close(a);
  close(b);
  char line[512] = {0};
  size_t got = 0;
  ssize_t n;
  while (got < sizeof line - 1 && (n = read(fd[0], line + got, sizeof line - 1 - got)) > 0) got += n;
  close(fd[0]);
  reap(deadline + 2);
  if (got == 0 || line[got - 1] != '\n') {
    fprintf(stderr, "udp_raw rtt: no result before the deadline\n");
    return 1;
  }
  printf("result bench=rtt system=raw-udp bytes=%d cpus=%d,%d placement=%s %s", size, cpu_a, cpu_b,
         cpu_a < 0 || cpu_b < 0 ? "unpinned" : cpu_a == cpu_b ? "same-cpu" : "different-cpus", line);
  return 0;
}

static int tput(int count, int size, int receivers, double deadline_s) {
  if (size < 8 || size > 60000) die("size between 8 and 60000");
  if (receivers < 1 || receivers > 16) die("receivers between 1 and 16");
  double deadline = now_s() + deadline_s;
  struct sockaddr_in raddr[16];
  int rsock[16], rpipe[16];
  for (int r = 0; r < receivers; r++) rsock[r] = udp_socket(4 * 1024 * 1024, &raddr[r]);
  for (int r = 0; r < receivers; r++) {
    int fd[2];
    if (pipe(fd) != 0) die("pipe");
    pid_t p = fork();
    if (p < 0) die("fork");
    if (p == 0) {
      close(fd[0]);
      char buf[65536];
      long received = 0, disorder = 0;
      uint32_t next = 0;
      double first = 0, last = 0;
      /* "hello" from the sender is answered so that it knows we listen. */
      for (;;) {
        ssize_t n = recv_within(rsock[r], buf, sizeof buf, received ? 1.0 : deadline - now_s());
        if (n < 0) break; /* the sender is done and its end marker was lost, or the deadline */
        if (n == 3 && memcmp(buf, "end", 3) == 0) break;
        if (n == 5 && memcmp(buf, "hello", 5) == 0) continue;
        if (n != size) continue;
        double t = now_s();
        if (!received) first = t;
        last = t;
        received++;
        uint32_t seq;
        memcpy(&seq, buf, 4);
        if (seq < next) disorder++;
        else next = seq + 1;
      }
      dprintf(fd[1], "received=%ld disorder=%ld span_s=%.6f\n", received, disorder, last - first);
      _exit(0);
    }
    close(fd[1]);
    rpipe[r] = fd[0];
    children[nchildren++] = p;
  }
  int sfd[2];
  if (pipe(sfd) != 0) die("pipe");
  pid_t s = fork();
  if (s < 0) die("fork");
  if (s == 0) {
    close(sfd[0]);
    struct sockaddr_in me;
    int sock = udp_socket(0, &me);
    char *msg = calloc(1, size);
    if (!msg) _exit(1);
    usleep(20000); /* the receivers are bound already (sockets made before fork) */
    long failed = 0;
    double t0 = now_s();
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
      memcpy(msg, &i, 4);
      for (int r = 0; r < receivers; r++)
        if (sendto(sock, msg, size, 0, (struct sockaddr *)&raddr[r], sizeof raddr[r]) < 0) failed++;
      if ((i & 1023) == 0 && now_s() > deadline) break;
    }
    double span = now_s() - t0;
    for (int k = 0; k < 5; k++) {
      for (int r = 0; r < receivers; r++) sendto(sock, "end", 3, 0, (struct sockaddr *)&raddr[r], sizeof raddr[r]);
      usleep(10000);
    }
    dprintf(sfd[1], "sent=%ld failed=%ld span_s=%.6f\n", (long)count * receivers, failed, span);
    _exit(0);
  }
  children[nchildren++] = s;
  close(sfd[1]);
  for (int r = 0; r < receivers; r++) close(rsock[r]);
  char lines[17][256];
  int ok = 1;
  for (int r = 0; r <= receivers; r++) {
    int f = r < receivers ? rpipe[r] : sfd[0];
    size_t got = 0;
    ssize_t n;
    memset(lines[r], 0, sizeof lines[r]);
    while (got < sizeof lines[r] - 1 && (n = read(f, lines[r] + got, sizeof lines[r] - 1 - got)) > 0) got += n;
    close(f);
    if (got == 0 || lines[r][got - 1] != '\n') ok = 0;
    else lines[r][got - 1] = 0;
  }
  reap(deadline + 2);
  if (!ok) {
    fprintf(stderr, "udp_raw tput: a process gave no result before the deadline\n");
    return 1;
  }
  /* One line: the sender, then each receiver's figures; the rate of the
     slowest receiver is what the table shows. */
  double slowest = -1;
  long total = 0;
  printf("result bench=tput system=raw-udp bytes=%d count=%d senders=1 receivers=%d sender_%s", size, count,
         receivers, lines[receivers]);
  for (int r = 0; r < receivers; r++) {
    long rec = 0, dis = 0;
    double span = 0;
    sscanf(lines[r], "received=%ld disorder=%ld span_s=%lf", &rec, &dis, &span);
    double rate = rec > 1 && span > 0 ? (rec - 1) / span : 0;
    if (slowest < 0 || rate < slowest) slowest = rate;
    total += rec;
    printf(" r%d_received=%ld r%d_disorder=%ld r%d_span_s=%.6f r%d_msgs_per_s=%.0f", r, rec, r, dis, r, span, r, rate);
  }
  printf(" lost_pct=%.2f msgs_per_s=%.0f\n", 100.0 * ((double)count * receivers - total) / ((double)count * receivers),
         slowest);
  return 0;
}


/* {1 flow: sendmmsg/recvmmsg with a credit window} */

enum { F_DATA = 1, F_END = 2, F_CREDIT = 3 };
#define F_BATCH 64
#define F_MAXM 8

struct fhdr {
  uint32_t kind, from, seq, pad;
};

static void set_buf(int s, int opt_force, int opt, int bytes) {
  if (setsockopt(s, SOL_SOCKET, opt_force, &bytes, sizeof bytes) != 0)
    setsockopt(s, SOL_SOCKET, opt, &bytes, sizeof bytes);
}

static int get_rcvbuf(int s) {
  int v = 0;
  socklen_t l = sizeof v;
  getsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &l);
  return v;
}

/* One member: sends (when it is one of the senders) and receives, in one
   loop, until it has sent everything, has every sender's end marker, and
   the deadline has not passed. Writes its result line to out. */
static void flow_member(int me, int members, int senders, long count, double min_s, int size, long window,
                        int *ds, struct sockaddr_in *daddr, int *cs, struct sockaddr_in *caddr, double deadline,
                        int out) {
  int sending = me < senders;
  char *buf = calloc(F_BATCH, size < 64 ? 64 : size);
  char *sbuf = calloc(F_BATCH, size);
  if (!buf || !sbuf) _exit(1);
  struct mmsghdr rm[F_BATCH], sm[F_BATCH];
  struct iovec riov[F_BATCH], siov[F_BATCH];
  for (int k = 0; k < F_BATCH; k++) {
    riov[k].iov_base = buf + (size_t)k * (size < 64 ? 64 : size);
    riov[k].iov_len = size < 64 ? 64 : size;
    siov[k].iov_base = sbuf + (size_t)k * size;
    siov[k].iov_len = size;
  }
  /* Sending: per peer, the next sequence number and the credit returned. */
  long next[F_MAXM] = {0}, acked[F_MAXM] = {0};
  long total = sending ? count : 0; /* grows with --min-seconds */
  /* Receiving: per sender. */
  long expect[F_MAXM] = {0}, got[F_MAXM] = {0}, lost[F_MAXM] = {0}, disorder = 0, credited[F_MAXM] = {0};
  long end_total[F_MAXM];
  int end_seen[F_MAXM] = {0};
  for (int k = 0; k < F_MAXM; k++) end_total[k] = -1;
  long credit_every = window / 4 > 0 ? window / 4 : 1;
  long delivered = 0, own = 0;
  double first = 0, last = 0, t_start = now_s();
  int sent_all = !sending, late = 0;
  for (;;) {
    double t = now_s();
    if (t > deadline) {
      late = 1;
      break;
    }
    int progress = 0, wait_out = 0;
    if (sending && !sent_all) {
      if (min_s > 0 && t - t_start < min_s) {
        long least = next[me == 0 ? 1 : 0];
        for (int p = 0; p < members; p++)
          if (p != me && next[p] < least) least = next[p];
        if (least + 4 * F_BATCH > total) total += 4 * F_BATCH;
      }
      int all_done = 1;
      for (int p = 0; p < members; p++) {
        if (p == me || next[p] >= total) continue;
        long room = acked[p] + window - next[p];
        if (room > total - next[p]) room = total - next[p];
        if (room > F_BATCH) room = F_BATCH;
        if (room > 0) {
          for (int k = 0; k < room; k++) {
            struct fhdr h = {F_DATA, (uint32_t)me, (uint32_t)(next[p] + k), 0};
            memcpy(siov[k].iov_base, &h, sizeof h);
            memset(&sm[k], 0, sizeof sm[k]);
            sm[k].msg_hdr.msg_name = &daddr[p];
            sm[k].msg_hdr.msg_namelen = sizeof daddr[p];
            sm[k].msg_hdr.msg_iov = &siov[k];
            sm[k].msg_hdr.msg_iovlen = 1;
          }
          int n = sendmmsg(ds[me], sm, room, MSG_DONTWAIT);
          if (n > 0) {
            next[p] += n;
            progress = 1;
          } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS))
            wait_out = 1;
          else if (n < 0 && errno != EINTR)
            _exit(1);
        }
        if (next[p] < total) all_done = 0;
      }
      /* Its own datagrams are delivered once sent to every peer. */
      long least = -1;
      for (int p = 0; p < members; p++)
        if (p != me && (least < 0 || next[p] < least)) least = next[p];
      if (least > own) {
        if (!delivered) first = now_s();
        delivered += least - own;
        own = least;
        last = now_s();
      }
      if (all_done && !(min_s > 0 && now_s() - t_start < min_s)) {
        sent_all = 1;
        for (int p = 0; p < members; p++) {
          if (p == me) continue;
          struct fhdr h = {F_END, (uint32_t)me, (uint32_t)total, 0};
          for (int k = 0; k < 3; k++) sendto(ds[me], &h, sizeof h, 0, (struct sockaddr *)&daddr[p], sizeof daddr[p]);
        }
      }
    }
    /* Credit returned to this sender. */
    if (sending) {
      for (int k = 0; k < F_BATCH; k++) {
        memset(&rm[k], 0, sizeof rm[k]);
        rm[k].msg_hdr.msg_iov = &riov[k];
        rm[k].msg_hdr.msg_iovlen = 1;
      }
      int n = recvmmsg(cs[me], rm, F_BATCH, MSG_DONTWAIT, NULL);
      for (int k = 0; k < n; k++) {
        struct fhdr h;
        if (rm[k].msg_len < sizeof h) continue;
        memcpy(&h, riov[k].iov_base, sizeof h);
        if (h.kind == F_CREDIT && h.from < (uint32_t)members && (long)h.seq > acked[h.from]) acked[h.from] = h.seq;
      }
      if (n > 0) progress = 1;
    }
    /* Data from the other senders. */
    for (int k = 0; k < F_BATCH; k++) {
      memset(&rm[k], 0, sizeof rm[k]);
      rm[k].msg_hdr.msg_iov = &riov[k];
      rm[k].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(ds[me], rm, F_BATCH, MSG_DONTWAIT, NULL);
    if (n > 0) {
      progress = 1;
      double tr = now_s();
      for (int k = 0; k < n; k++) {
        struct fhdr h;
        if (rm[k].msg_len < sizeof h) continue;
        memcpy(&h, riov[k].iov_base, sizeof h);
        if (h.from >= (uint32_t)senders || (int)h.from == me) continue;
        int s = h.from;
        if (h.kind == F_END) {
          if (!end_seen[s]) {
            end_seen[s] = 1;
            end_total[s] = h.seq;
            if (expect[s] < end_total[s]) lost[s] += end_total[s] - expect[s];
          }
          continue;
        }
        if (h.kind != F_DATA || rm[k].msg_len != (unsigned)size) continue;
        if (!delivered) first = tr;
        last = tr;
        delivered++;
        got[s]++;
        if ((long)h.seq < expect[s]) disorder++;
        else {
          lost[s] += h.seq - expect[s];
          expect[s] = h.seq + 1;
        }
      }
      /* Credit: what was consumed from each sender, every W/4. */
      for (int s = 0; s < senders; s++) {
        if (s == me || expect[s] - credited[s] < credit_every) continue;
        struct fhdr h = {F_CREDIT, (uint32_t)me, (uint32_t)expect[s], 0};
        if (sendto(ds[me], &h, sizeof h, 0, (struct sockaddr *)&caddr[s], sizeof caddr[s]) == sizeof h)
          credited[s] = expect[s];
      }
    }
    int all_ended = 1;
    for (int s = 0; s < senders; s++)
      if (s != me && !end_seen[s]) all_ended = 0;
    if (sent_all && all_ended) break;
    if (!progress) {
      struct pollfd pf[2] = {{.fd = ds[me], .events = POLLIN | (wait_out ? POLLOUT : 0)},
                             {.fd = cs[me], .events = POLLIN}};
      poll(pf, sending ? 2 : 1, 1);
    }
  }
  long l = 0, g = 0;
  for (int s = 0; s < senders; s++) {
    l += lost[s];
    g += got[s];
  }
  double span = last - first;
  dprintf(out, "m%d_delivered=%ld m%d_own=%ld m%d_received=%ld m%d_lost=%ld m%d_disorder=%ld m%d_span_s=%.6f m%d_late=%d m%d_msgs_per_s=%.0f\n",
          me, delivered, me, own, me, g, me, l, me, disorder, me, span, me, late, me,
          delivered > 1 && span > 0 ? (delivered - 1) / span : 0.0);
  _exit(late ? 1 : 0);
}

static int flow(long count, int size, int members, int senders, double min_s, long window, int rcvbuf, const int *cpus,
                int ncpus, double deadline_s) {
  if (size < 16 || size > 60000) die("size between 16 and 60000");
  if (members < 2 || members > F_MAXM) die("members between 2 and 8");
  if (senders < 1 || senders > members) die("senders between 1 and members");
  double deadline = now_s() + deadline_s;
  int ds[F_MAXM], cs[F_MAXM];
  struct sockaddr_in daddr[F_MAXM], caddr[F_MAXM];
  for (int m = 0; m < members; m++) {
    ds[m] = udp_socket(0, &daddr[m]);
    set_buf(ds[m], SO_RCVBUFFORCE, SO_RCVBUF, rcvbuf);
    set_buf(ds[m], SO_SNDBUFFORCE, SO_SNDBUF, rcvbuf);
    cs[m] = udp_socket(0, &caddr[m]);
  }
  int actual = get_rcvbuf(ds[0]);
  int from = senders < members ? senders : members - 1; /* senders a receiver hears */
  if (window <= 0) {
    /* Every sender's window must fit in the receive buffer, with room for
       the kernel's overhead per datagram (a factor of 2 in all). */
    window = actual / 2 / from / (size + 1024);
    if (window < 1) window = 1;
    if (window > 4096) window = 4096;
  }
  int pipes[F_MAXM];
  for (int m = 0; m < members; m++) {
    int fd[2];
    if (pipe(fd) != 0) die("pipe");
    pid_t p = fork();
    if (p < 0) die("fork");
    if (p == 0) {
      close(fd[0]);
      if (ncpus > 0) pin(cpus[m % ncpus]);
      flow_member(m, members, senders, count, min_s, size, window, ds, daddr, cs, caddr, deadline, fd[1]);
    }
    close(fd[1]);
    pipes[m] = fd[0];
    children[nchildren++] = p;
  }
  for (int m = 0; m < members; m++) {
    close(ds[m]);
    close(cs[m]);
  }
  char lines[F_MAXM][512];
  int ok = 1;
  for (int m = 0; m < members; m++) {
    size_t got = 0;
    ssize_t n;
    memset(lines[m], 0, sizeof lines[m]);
    while (got < sizeof lines[m] - 1 && (n = read(pipes[m], lines[m] + got, sizeof lines[m] - 1 - got)) > 0) got += n;
    close(pipes[m]);
    if (got == 0 || lines[m][got - 1] != '\n') ok = 0;
    else lines[m][got - 1] = 0;
  }
  reap(deadline + 2);
  if (!ok) {
    fprintf(stderr, "udp_raw flow: a member gave no result before the deadline\n");
    return 1;
  }
  double slowest = -1;
  long lost = 0, disorder = 0, late = 0;
  printf("result bench=tput system=raw-udp mode=flow bytes=%d count=%ld senders=%d members=%d window=%ld rcvbuf=%d",
         size, count, senders, members, window, actual);
  for (int m = 0; m < members; m++) {
    char key[32];
    long v;
    double rate = 0;
    printf(" %s", lines[m]);
    snprintf(key, sizeof key, "m%d_msgs_per_s=", m);
    char *p = strstr(lines[m], key);
    if (p) rate = strtod(p + strlen(key), NULL);
    if (slowest < 0 || rate < slowest) slowest = rate;
    snprintf(key, sizeof key, "m%d_lost=", m);
    if ((p = strstr(lines[m], key)) && sscanf(p + strlen(key), "%ld", &v) == 1) lost += v;
    snprintf(key, sizeof key, "m%d_disorder=", m);
    if ((p = strstr(lines[m], key)) && sscanf(p + strlen(key), "%ld", &v) == 1) disorder += v;
    snprintf(key, sizeof key, "m%d_late=", m);
    if ((p = strstr(lines[m], key)) && sscanf(p + strlen(key), "%ld", &v) == 1) late += v;
  }
  printf(" lost=%ld disorder=%ld late=%ld msgs_per_s=%.0f mb_per_s=%.1f\n", lost, disorder, late, slowest,
         slowest * size / 1e6);
  return late ? 1 : 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: udp_raw rtt --count N --warmup W --size B --cpus A,B [--deadline S]\n"
          "       udp_raw tput --count N --size B --receivers R [--deadline S]\n"
          "       udp_raw flow --count N --size B --senders S [--members M] [--min-seconds T] [--window W]\n"
          "                    [--rcvbuf BYTES] [--cpus A,B,...] [--deadline S]\n");
  exit(2);
}

static long num(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) {
    fprintf(stderr, "udp_raw: %s: expected a number from %ld to %ld\n", s, lo, hi);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  long count = 10000, warmup = 500, size = -1, receivers = 2, senders = 1, members = 3, window = 0;
  long rcvbuf = 8 * 1024 * 1024, min_s = 0;
  int cpu_a = -1, cpu_b = -1, cpus[F_MAXM], ncpus = 0;
  double deadline = 30;
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    const char *k = argv[i], *v = argv[++i];
    if (!strcmp(k, "--count")) count = num(v, 1, 10000000);
    else if (!strcmp(k, "--warmup")) warmup = num(v, 0, 1000000);
    else if (!strcmp(k, "--size")) size = num(v, 8, 60000);
    else if (!strcmp(k, "--receivers")) receivers = num(v, 1, 16);
    else if (!strcmp(k, "--deadline")) deadline = num(v, 1, 3600);
    else if (!strcmp(k, "--senders")) senders = num(v, 1, F_MAXM);
    else if (!strcmp(k, "--members")) members = num(v, 2, F_MAXM);
    else if (!strcmp(k, "--window")) window = num(v, 0, 1000000);
    else if (!strcmp(k, "--rcvbuf")) rcvbuf = num(v, 4096, 1 << 30);
    else if (!strcmp(k, "--min-seconds")) min_s = num(v, 0, 3600);
    else if (!strcmp(k, "--cpus") && !strcmp(argv[1], "flow")) {
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (ncpus == F_MAXM) usage();
        cpus[ncpus++] = num(t, 0, 4095);
      }
      free(copy);
    } else if (!strcmp(k, "--cpus")) {
      if (sscanf(v, "%d,%d", &cpu_a, &cpu_b) != 2) {
        fprintf(stderr, "udp_raw: --cpus A,B (or -1,-1 for unpinned)\n");
        exit(2);
      }
    } else usage();
  }
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(argv[1], "rtt")) return rtt(count, warmup, size < 0 ? 16 : size, cpu_a, cpu_b, deadline);
  if (!strcmp(argv[1], "tput")) return tput(count, size < 0 ? 1024 : size, receivers, deadline);
  if (!strcmp(argv[1], "flow"))
    return flow(count, size < 0 ? 1024 : size, members, senders, min_s, window, rcvbuf, cpus, ncpus, deadline);
  usage();
  return 2;
}
