/* One member process of the Corosync CPG benchmarks in `make bench-peers`.
 *
 *   cpg_bench tput --members N --index I --count C --size B --senders S
 *       [--deadline SECONDS] [--group NAME]
 *       Joins the group, waits for N members, and (when I < S) casts C
 *       messages of B bytes with CPG_TYPE_AGREED (CPG's only ordering: every
 *       member delivers every message in the same total order). Every member
 *       checks each sender's messages arrive once and in order, folds the
 *       order of all deliveries into a hash (equal at every member when the
 *       order is total), and times its first to its last delivery.
 *   cpg_bench rtt --index 0|1 --count C --warmup W --size B [--deadline S]
 *       Two members; 0 casts a message, 1 casts it back on delivery; 0 times
 *       each round trip.
 *
 * Every run is bounded by --deadline. The result is one line of key=value
 * pairs on stdout starting with "result"; errors go to stderr, exit 1. */
#define _GNU_SOURCE
#include <corosync/cpg.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { DATA = 1, DONE = 2, PING = 3, PONG = 4, STOP = 5 };

struct hdr {
  uint32_t kind, from, seq, pad;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static cpg_handle_t h;
static int members_seen, members_want = 3, me, count = 10000, warmup = 500, size = 1024, senders = 1;
static double deadline;
/* tput */
static uint32_t next_seq[64];
static long delivered, expected, errors, done_from;
static uint64_t order_hash = 1469598103934665603ULL;
static double first_t, last_t;
/* rtt */
static int rtt_got = -1, stopped;
static double *samples;

static void fail(const char *what, cs_error_t e) {
  fprintf(stderr, "cpg_bench: %s failed: cs_error %d\n", what, (int)e);
  exit(1);
}

static void fold(uint32_t x) {
  for (int i = 0; i < 4; i++) {
    order_hash ^= (x >> (8 * i)) & 0xff;
    order_hash *= 1099511628211ULL;
  }
}

static void on_deliver(cpg_handle_t hh, const struct cpg_name *g, uint32_t nodeid, uint32_t pid, void *msg,
                       size_t len) {
  (void)hh, (void)g, (void)nodeid, (void)pid;
  struct hdr m;
  if (len < sizeof m) {
    errors++;
    return;
  }
  memcpy(&m, msg, sizeof m);
  switch (m.kind) {
  case DATA: {
    double t = now_s();
    if (!delivered) first_t = t;
    last_t = t;
    delivered++;
    if (m.from >= 64 || (int)m.from >= senders || m.seq != next_seq[m.from] || len != (size_t)size) errors++;
    if (m.from < 64) next_seq[m.from] = m.seq + 1;
    fold(m.from);
    fold(m.seq);
    break;
  }
  case DONE: done_from |= 1L << (m.from & 63); break;
  case PING: if (me == 1) rtt_got = (int)m.seq; break;
  case PONG: if (me == 0 && m.from == 1) rtt_got = (int)m.seq; break;
  case STOP: stopped = 1; break;
  default: errors++;
  }
}

static void on_confchg(cpg_handle_t hh, const struct cpg_name *g, const struct cpg_address *m, size_t n,
                       const struct cpg_address *l, size_t nl, const struct cpg_address *j, size_t nj) {
  (void)hh, (void)g, (void)m, (void)l, (void)nl, (void)j, (void)nj;
  members_seen = (int)n;
}

static void pump(int timeout_ms) {
  int fd;
  cs_error_t e = cpg_fd_get(h, &fd);
  if (e != CS_OK) fail("cpg_fd_get", e);
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) > 0) {
    e = cpg_dispatch(h, CS_DISPATCH_ALL);
    if (e != CS_OK && e != CS_ERR_TRY_AGAIN) fail("cpg_dispatch", e);
  }
}

static void cast(uint32_t kind, uint32_t seq, int len) {
  static char buf[65536];
  struct hdr m = {kind, (uint32_t)me, seq, 0};
  memcpy(buf, &m, sizeof m);
  struct iovec iov = {buf, (size_t)len};
  for (;;) {
    cs_error_t e = cpg_mcast_joined(h, CPG_TYPE_AGREED, &iov, 1);
    if (e == CS_OK) return;
    if (e != CS_ERR_TRY_AGAIN) fail("cpg_mcast_joined", e);
    if (now_s() > deadline) {
      fprintf(stderr, "cpg_bench: deadline while casting\n");
      exit(1);
    }
    pump(1); /* CPG's flow control: deliver what is waiting, then retry */
  }
}

static void wait_members(void) {
  while (members_seen < members_want) {
    if (now_s() > deadline) {
      fprintf(stderr, "cpg_bench: only %d of %d members before the deadline\n", members_seen, members_want);
      exit(1);
    }
    pump(50);
  }
}

static int tput(void) {
  expected = (long)count * senders;
  wait_members();
  if (me < senders)
    for (int i = 0; i < count; i++) {
      cast(DATA, (uint32_t)i, size);
      if ((i & 255) == 0) pump(0);
    }
  while (delivered < expected && now_s() < deadline) pump(50);
  /* Stay until every member has everything, so that nobody leaves early. */
  cast(DONE, 0, sizeof(struct hdr));
  long all = (members_want >= 64 ? -1L : (1L << members_want) - 1);
  while ((done_from & all) != all && now_s() < deadline) pump(50);
  printf("result bench=tput system=corosync-cpg index=%d members=%d senders=%d bytes=%d count=%d delivered=%ld "
         "expected=%ld errors=%ld span_s=%.6f msgs_per_s=%.0f order_hash=%016llx\n",
         me, members_want, senders, size, count, delivered, expected, errors, last_t - first_t,
         delivered > 1 && last_t > first_t ? (delivered - 1) / (last_t - first_t) : 0.0,
         (unsigned long long)order_hash);
  return delivered == expected && errors == 0 ? 0 : 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int rtt(void) {
  members_want = 2;
  wait_members();
  if (me == 1) {
    while (!stopped && now_s() < deadline) {
      pump(50);
      if (rtt_got >= 0) {
        int s = rtt_got;
        rtt_got = -1;
        cast(PONG, (uint32_t)s, size);
      }
    }
    printf("result bench=rtt system=corosync-cpg role=pong\n");
    return stopped ? 0 : 1;
  }
  samples = calloc(count, sizeof(double));
  for (int i = 0; i < warmup + count; i++) {
    double t0 = now_s();
    rtt_got = -1;
    cast(PING, (uint32_t)i, size);
    while (rtt_got != i) {
      if (now_s() > deadline) {
        fprintf(stderr, "cpg_bench: deadline at round trip %d\n", i);
        return 1;
      }
      pump(50);
    }
    if (i >= warmup) samples[i - warmup] = (now_s() - t0) * 1e6;
  }
  cast(STOP, 0, sizeof(struct hdr));
  double sum = 0;
  for (int i = 0; i < count; i++) sum += samples[i];
  qsort(samples, count, sizeof(double), cmp_double);
  printf("result bench=rtt system=corosync-cpg role=ping bytes=%d n=%d min_us=%.2f median_us=%.2f p99_us=%.2f "
         "mean_us=%.2f\n",
         size, count, samples[0],
         count % 2 ? samples[count / 2] : (samples[count / 2 - 1] + samples[count / 2]) / 2,
         samples[(int)(0.99 * (count - 1) + 0.5)], sum / count);
  return 0;
}

static long num(const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < lo || v > hi) {
    fprintf(stderr, "cpg_bench: %s: expected a number from %ld to %ld\n", s, lo, hi);
    exit(2);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "tput") && strcmp(argv[1], "rtt"))) {
    fprintf(stderr, "usage: cpg_bench tput|rtt --index I [--members N --count C --warmup W --size B --senders S "
                    "--deadline SECONDS --group NAME]\n");
    return 2;
  }
  const char *group = "consort-bench";
  double dl = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--index")) me = num(v, 0, 63);
    else if (!strcmp(k, "--members")) members_want = num(v, 2, 63);
    else if (!strcmp(k, "--count")) count = num(v, 1, 10000000);
    else if (!strcmp(k, "--warmup")) warmup = num(v, 0, 1000000);
    else if (!strcmp(k, "--size")) size = num(v, sizeof(struct hdr), 60000);
    else if (!strcmp(k, "--senders")) senders = num(v, 1, 63);
    else if (!strcmp(k, "--deadline")) dl = num(v, 1, 3600);
    else if (!strcmp(k, "--group")) group = v;
    else {
      fprintf(stderr, "cpg_bench: unknown option %s\n", k);
      return 2;
    }
  }
  if (senders > members_want) senders = members_want;
  setvbuf(stdout, NULL, _IOLBF, 0);
  deadline = now_s() + dl;
  cpg_callbacks_t cb = {.cpg_deliver_fn = on_deliver, .cpg_confchg_fn = on_confchg};
  cs_error_t e;
  /* The daemon may still be starting: retry for a while. */
  while ((e = cpg_initialize(&h, &cb)) != CS_OK) {
    if (now_s() > deadline) fail("cpg_initialize", e);
    usleep(100000);
  }
  struct cpg_name name;
  name.length = strlen(group) > CPG_MAX_NAME_LENGTH ? CPG_MAX_NAME_LENGTH : strlen(group);
  memcpy(name.value, group, name.length);
  while ((e = cpg_join(h, &name)) != CS_OK) {
    if (e != CS_ERR_TRY_AGAIN || now_s() > deadline) fail("cpg_join", e);
    usleep(10000);
  }
  int rc = !strcmp(argv[1], "tput") ? tput() : rtt();
  cpg_leave(h, &name);
  cpg_finalize(h);
  return rc;
}
