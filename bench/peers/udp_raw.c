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

static void usage(void) {
  fprintf(stderr,
          "usage: udp_raw rtt --count N --warmup W --size B --cpus A,B [--deadline S]\n"
          "       udp_raw tput --count N --size B --receivers R [--deadline S]\n");
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
  long count = 10000, warmup = 500, size = -1, receivers = 2;
  int cpu_a = -1, cpu_b = -1;
  double deadline = 30;
  for (int i = 2; i < argc; i++) {
    if (i + 1 >= argc) usage();
    const char *k = argv[i], *v = argv[++i];
    if (!strcmp(k, "--count")) count = num(v, 1, 100000000);
    else if (!strcmp(k, "--warmup")) warmup = num(v, 0, 1000000);
    else if (!strcmp(k, "--size")) size = num(v, 8, 60000);
    else if (!strcmp(k, "--receivers")) receivers = num(v, 1, 16);
    else if (!strcmp(k, "--deadline")) deadline = num(v, 1, 3600);
    else if (!strcmp(k, "--cpus")) {
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
  usage();
  return 2;
}
