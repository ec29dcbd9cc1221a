/* Kernel TCP endpoints for the TCP benchmark, run inside a network
   namespace. Every mode is bounded in time (SECONDS) and prints one line
   "RESULT key=value ..." on success, with its own CPU time (getrusage)
   over the measured part.

     tcp_peer sink PORT SECONDS
       listens (prints "LISTENING"), accepts one connection and reads it to
       the end; bytes= and secs= (first byte to end of stream).
     tcp_peer source HOST PORT BYTES SECONDS
       connects (retrying refused connections), writes BYTES (or until
       SECONDS pass), shuts down its side and waits for the peer's end;
       bytes= and secs= (connected to the peer's end).
     tcp_peer pong PORT SIZE SECONDS
       listens (prints "LISTENING"), accepts one connection (TCP_NODELAY),
       and answers every SIZE-byte message with itself until the end.
     tcp_peer ping HOST PORT SIZE COUNT SECONDS
       connects (TCP_NODELAY), warms up, then sends a SIZE-byte message and
       waits for its echo COUNT times (or until SECONDS pass); rounds= and
       round-trip times in microseconds: min= median= p99= mean= max=. */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#define PEER_PREFIX ""
#include "peer_common.h"

#define CHUNK (128 * 1024)

static unsigned char buf[CHUNK];

static void nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) die("TCP_NODELAY");
}

static int accept_one(int port, double secs) {
  struct sockaddr_in a = {0};
  int one = 1, l = socket(AF_INET, SOCK_STREAM, 0), s;
  if (l < 0) die("socket");
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  listen_announce(l, (struct sockaddr *)&a, sizeof a, port, secs);
  s = accept(l, NULL, NULL);
  if (s < 0) die("accept");
  close(l);
  timeouts(s, secs);
  return s;
}

static int connect_to(const char *host, int port, double secs) {
  struct sockaddr_in a = {0};
  double deadline = now() + secs;
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) die("inet_pton");
  for (;;) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    timeouts(s, secs);
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) return s;
    if (errno != ECONNREFUSED || now() > deadline) die("connect");
    close(s);
    usleep(20000);
  }
}

static int read_full(int s, unsigned char *p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(s, p + got, n - got);
    if (k == 0) return 0;
    if (k < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    got += (size_t)k;
  }
  return 1;
}

static void write_full(int s, const unsigned char *p, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t k = write(s, p + put, n - put);
    if (k < 0) {
      if (errno == EINTR) continue;
      die("write");
    }
    put += (size_t)k;
  }
}

static int sink(int port, double secs) {
  int s = accept_one(port, secs);
  double u0, s0, u1, s1, t0 = 0, t1, deadline = now() + secs;
  long long bytes = 0;
  cpu(&u0, &s0);
  for (;;) {
    ssize_t k = read(s, buf, sizeof buf);
    if (k == 0) break;
    if (k < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    if (bytes == 0) t0 = now();
    bytes += k;
    if (now() > deadline) {
      fprintf(stderr, "sink: out of time\n");
      return 1;
    }
  }
  t1 = now();
  cpu(&u1, &s1);
  close(s);
  printf("RESULT bytes=%lld secs=%.6f utime=%.6f stime=%.6f\n", bytes, t1 - t0, u1 - u0, s1 - s0);
  return 0;
}

static int source(const char *host, int port, long long total, double secs) {
  int s = connect_to(host, port, secs);
  double u0, s0, u1, s1, t0 = now(), t1, deadline = t0 + secs;
  long long bytes = 0;
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + 1);
  cpu(&u0, &s0);
  while (bytes < total && now() < deadline) {
    size_t n = total - bytes < (long long)sizeof buf ? (size_t)(total - bytes) : sizeof buf;
    write_full(s, buf, n);
    bytes += (long long)n;
  }
  shutdown(s, SHUT_WR);
  while (read(s, buf, sizeof buf) > 0) {
  }
  t1 = now();
  cpu(&u1, &s1);
  close(s);
  printf("RESULT bytes=%lld secs=%.6f utime=%.6f stime=%.6f\n", bytes, t1 - t0, u1 - u0, s1 - s0);
  return 0;
}

static int pong(int port, int size, double secs) {
  int s = accept_one(port, secs);
  long rounds = 0;
  double u0, s0, u1, s1;
  nodelay(s);
  cpu(&u0, &s0);
  while (read_full(s, buf, (size_t)size)) {
    write_full(s, buf, (size_t)size);
    rounds++;
  }
  cpu(&u1, &s1);
  close(s);
  printf("RESULT rounds=%ld utime=%.6f stime=%.6f\n", rounds, u1 - u0, s1 - s0);
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int ping(const char *host, int port, int size, long count, double secs) {
  int s = connect_to(host, port, secs);
  double *rtt = malloc(sizeof(double) * (size_t)count), sum = 0, u0, s0, u1, s1;
  double deadline = now() + secs;
  long warm = count / 10 < 50 ? 50 : count / 10, n = 0;
  if (!rtt) die("malloc");
  nodelay(s);
  memset(buf, 'p', (size_t)size);
  for (long i = 0; i < warm; i++) {
    write_full(s, buf, (size_t)size);
    if (!read_full(s, buf, (size_t)size)) die("ping: early end");
  }
  cpu(&u0, &s0);
  while (n < count && now() < deadline) {
    double t0 = now();
    write_full(s, buf, (size_t)size);
    if (!read_full(s, buf, (size_t)size)) die("ping: early end");
    rtt[n++] = (now() - t0) * 1e6;
  }
  cpu(&u1, &s1);
  shutdown(s, SHUT_WR);
  while (read(s, buf, sizeof buf) > 0) {
  }
  close(s);
  if (n == 0) {
    fprintf(stderr, "ping: no round trip\n");
    return 1;
  }
  for (long i = 0; i < n; i++) sum += rtt[i];
  qsort(rtt, (size_t)n, sizeof(double), cmp);
  printf("RESULT rounds=%ld min=%.2f median=%.2f p99=%.2f mean=%.2f max=%.2f utime=%.6f stime=%.6f\n", n,
         rtt[0], rtt[n / 2], rtt[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], sum / n, rtt[n - 1], u1 - u0,
         s1 - s0);
  free(rtt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "sink") == 0) return sink(atoi(argv[2]), atof(argv[3]));
  if (argc == 6 && strcmp(argv[1], "source") == 0)
    return source(argv[2], atoi(argv[3]), atoll(argv[4]), atof(argv[5]));
  if (argc == 5 && strcmp(argv[1], "pong") == 0) return pong(atoi(argv[2]), atoi(argv[3]), atof(argv[4]));
  if (argc == 7 && strcmp(argv[1], "ping") == 0)
    return ping(argv[2], atoi(argv[3]), atoi(argv[4]), atol(argv[5]), atof(argv[6]));
  fprintf(stderr, "usage: %s sink PORT SECS | source HOST PORT BYTES SECS | pong PORT SIZE SECS | "
                  "ping HOST PORT SIZE COUNT SECS\n", argv[0]);
  return 2;
}
