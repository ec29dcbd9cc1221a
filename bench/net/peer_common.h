/* What the kernel peers of the TCP benchmarks (tcp_peer.c, hash_peer.c)
   share: the clock, the error exit, their own CPU time, the time bound of
   every blocking call and the listening socket's announcement. A peer defines PEER_PREFIX, what its error lines
   start with, before it includes this. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One line "PREFIXWHAT: the system's error" and exit status 2. */
static void die(const char *what) {
  fprintf(stderr, "%s%s: %s\n", PEER_PREFIX, what, strerror(errno));
  exit(2);
}

static void cpu(double *user, double *sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
  *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Every blocking call gives up after [secs]. */
static void timeouts(int fd, double secs) {
  struct timeval tv = {(time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* Binds the listening socket [l] to [a] and listens, every call on it
   bounded by [secs], then says so on standard output: "LISTENING PORT". */
static void listen_announce(int l, const struct sockaddr *a, socklen_t len, int port, double secs) {
  if (bind(l, a, len) < 0) die("bind");
  if (listen(l, 4) < 0) die("listen");
  timeouts(l, secs);
  printf("LISTENING %d\n", port);
  fflush(stdout);
}
