/* The impairment relay for kernel interop (this kernel has no netem): frames
   pass between two ports, each direction through its own seeded impairment:
   loss, duplication, reordering, delay and jitter, a rate limit with a
   bounded queue, and an MTU black hole (frames whose IP packet is larger
   than the path MTU vanish without an ICMP error). Consort's stack and a
   kernel-to-kernel baseline go through the same program with the same
   impairment in the same run (`consort bench tcp --impair`).

     impair_relay relay SPEC PORT_A PORT_B
       PORT is tap:NAME (creates TAP device NAME, IFF_TAP | IFF_NO_PI) or
       packet:NAME (an AF_PACKET socket on the existing interface NAME, for
       example the TAP device of Consort's stack). Prints "READY", then
       relays until standard input closes; each line read on standard input
       is answered with one "STATS" line per direction (a_to_b, then b_to_a)
       with cumulative counters and this process's CPU seconds; socket_drops
       counts the frames an AF_PACKET port dropped before the relay read
       them (a loss the SPEC did not ask for).

     impair_relay simulate SPEC
       the same impairment on virtual time, for tests: reads one frame a
       line, "T_US LEN" (arrival time in microseconds, nondecreasing, and
       frame length in bytes), and prints "OUT T_US INDEX" for every frame
       delivered, in delivery order (INDEX counts input frames from 0), then
       one "STATS" line.

     impair_relay check SPEC
       prints the impairment as understood ("SPEC ...") or one line of error
       and exits 2.

   SPEC is comma-separated KEY=VALUE, or "none": loss=P, dup=P, reorder=P
   (P a percentage "2%" or a fraction "0.02": the chance of each frame),
   delay=D, jitter=D (a uniform extra delay in [0, D)), reorder_delay=D (how
   long a reordered frame is held back beyond the others, default 1ms),
   rate=R (bits per second, suffix k, m or g, optionally "bit": "100mbit"),
   queue=BYTES (the rate limit's queue, default 1000000; a frame that finds
   it full is dropped), mtu=N (IP packets longer than N bytes are dropped:
   a black hole), seed=N (default 1). D is a number with us, ms or s.

   Every frame draws the same four random numbers from its direction's
   generator (xorshift64*, seeded from seed and the direction) whatever
   happens to it, so the fate of the i-th frame of a direction depends on
   the seed and i only. Memory is bounded: at most MAX_HELD frames and
   MAX_HELD_BYTES bytes are held (more are dropped and counted as
   overflow). */

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_packet.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define FRAME 65536
#define MAX_HELD 65536
#define MAX_HELD_BYTES (64 << 20)

struct spec {
  double loss, dup, reorder;
  uint64_t delay, jitter, reorder_delay; /* nanoseconds */
  uint64_t rate;                         /* bits per second, 0: none */
  uint64_t queue;                        /* bytes */
  long mtu;                              /* 0: none */
  uint64_t seed;
};

static void fail(const char *fmt, const char *arg) {
  fprintf(stderr, "impair_relay: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  exit(2);
}

static double parse_prob(const char *v) {
  char *end;
  double p = strtod(v, &end);
  if (end == v) fail("not a probability: %s", v);
  if (strcmp(end, "%") == 0) p /= 100.;
  else if (*end) fail("not a probability: %s", v);
  if (!(p >= 0. && p <= 1.)) fail("a probability must be within 0%% and 100%%: %s", v);
  return p;
}

static uint64_t parse_duration(const char *v) {
  char *end;
  double d = strtod(v, &end);
  double unit;
  if (end == v || !(d >= 0.)) fail("not a duration: %s", v);
  if (strcmp(end, "us") == 0) unit = 1e3;
  else if (strcmp(end, "ms") == 0) unit = 1e6;
  else if (strcmp(end, "s") == 0) unit = 1e9;
  else fail("a duration needs a unit (us, ms or s): %s", v);
  if (d * unit > 60e9) fail("a duration must be at most 60s: %s", v);
  return (uint64_t)(d * unit + 0.5);
}

static uint64_t parse_rate(const char *v) {
  char *end;
  double r = strtod(v, &end);
  double unit = 1;
  if (end == v || !(r > 0.)) fail("not a rate: %s", v);
  if (*end == 'k') unit = 1e3, end++;
  else if (*end == 'm') unit = 1e6, end++;
  else if (*end == 'g') unit = 1e9, end++;
  if (*end && strcmp(end, "bit") != 0) fail("not a rate (100mbit, 1g...): %s", v);
  if (r * unit < 1000. || r * unit > 1e12) fail("a rate must be within 1kbit and 1000gbit: %s", v);
  return (uint64_t)(r * unit);
}

static long parse_int(const char *v, long lo, long hi) {
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < lo || n > hi) fail("not a number in range: %s", v);
  return n;
}

static struct spec parse_spec(const char *text) {
  struct spec s = {0, 0, 0, 0, 0, 1000000, 0, 1000000, 0, 1};
  char *copy = strdup(text), *save = NULL, *item;
  if (!copy) fail("%s", "out of memory");
  if (strcmp(text, "none") == 0 || *text == 0) {
    free(copy);
    return s;
  }
  for (item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    if (!eq) fail("expected KEY=VALUE, got %s", item);
    *eq = 0;
    const char *k = item, *v = eq + 1;
    if (strcmp(k, "loss") == 0) s.loss = parse_prob(v);
    else if (strcmp(k, "dup") == 0) s.dup = parse_prob(v);
    else if (strcmp(k, "reorder") == 0) s.reorder = parse_prob(v);
    else if (strcmp(k, "delay") == 0) s.delay = parse_duration(v);
    else if (strcmp(k, "jitter") == 0) s.jitter = parse_duration(v);
    else if (strcmp(k, "reorder_delay") == 0) s.reorder_delay = parse_duration(v);
    else if (strcmp(k, "rate") == 0) s.rate = parse_rate(v);
    else if (strcmp(k, "queue") == 0) s.queue = (uint64_t)parse_int(v, 1500, 1L << 30);
    else if (strcmp(k, "mtu") == 0) s.mtu = parse_int(v, 68, 65535);
    else if (strcmp(k, "seed") == 0) s.seed = (uint64_t)parse_int(v, 0, 1L << 62);
    else fail("unknown key %s (loss, dup, reorder, delay, jitter, reorder_delay, rate, queue, mtu, seed)", k);
  }
  free(copy);
  return s;
}

static void print_spec(const struct spec *s) {
  printf("SPEC loss=%g%% dup=%g%% reorder=%g%% delay=%.0fus jitter=%.0fus reorder_delay=%.0fus rate=%llu "
         "queue=%llu mtu=%ld seed=%llu\n",
         s->loss * 100, s->dup * 100, s->reorder * 100, s->delay / 1e3, s->jitter / 1e3,
         s->reorder_delay / 1e3, (unsigned long long)s->rate, (unsigned long long)s->queue, s->mtu,
         (unsigned long long)s->seed);
}

/* {1 One direction} */

struct held {
  uint64_t due, seq;
  long index;
  size_t len;
  unsigned char *data; /* NULL in simulation */
};

struct dir {
  const struct spec *spec;
  uint64_t rng, seq, link_free;
  struct held *heap;
  size_t held, held_bytes;
  long in, out, lost, duplicated, reordered, blackholed, queue_drops, overflow, write_drops;
  uint64_t bytes_in; /* frame bytes taken (Ethernet header included) */
  size_t max_frame;  /* the largest frame taken: above the MTU, offloads pass super-frames */
};

static uint64_t next(struct dir *d) {
  uint64_t x = d->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  d->rng = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static double uniform(struct dir *d) { return (next(d) >> 11) * (1.0 / 9007199254740992.0); }

static void dir_init(struct dir *d, const struct spec *s, int which) {
  memset(d, 0, sizeof *d);
  d->spec = s;
  /* splitmix64 of the seed and the direction: never zero. */
  uint64_t z = s->seed * 2 + (uint64_t)which + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  d->rng = z ? z : 1;
  d->heap = malloc(sizeof(struct held) * MAX_HELD);
  if (!d->heap) fail("%s", "out of memory");
}

static int before(const struct held *a, const struct held *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void push(struct dir *d, struct held h) {
  size_t i = d->held++;
  d->heap[i] = h;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!before(&d->heap[i], &d->heap[p])) break;
    struct held t = d->heap[i];
    d->heap[i] = d->heap[p];
    d->heap[p] = t;
    i = p;
  }
}

static struct held pop(struct dir *d) {
  struct held top = d->heap[0];
  d->held_bytes -= top.len;
  d->heap[0] = d->heap[--d->held];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < d->held && before(&d->heap[l], &d->heap[m])) m = l;
    if (r < d->held && before(&d->heap[r], &d->heap[m])) m = r;
    if (m == i) break;
    struct held t = d->heap[i];
    d->heap[i] = d->heap[m];
    d->heap[m] = t;
    i = m;
  }
  return top;
}

static void hold(struct dir *d, uint64_t due, long index, const unsigned char *frame, size_t len) {
  struct held h = {due, d->seq++, index, len, NULL};
  if (d->held >= MAX_HELD || d->held_bytes + len > MAX_HELD_BYTES) {
    d->overflow++;
    return;
  }
  if (frame) {
    h.data = malloc(len);
    if (!h.data) {
      d->overflow++;
      return;
    }
    memcpy(h.data, frame, len);
  }
  d->held_bytes += len;
  push(d, h);
}

/* The IP packet's length in an Ethernet frame: what the MTU limits. */
static size_t ip_length(size_t frame_len) { return frame_len > 14 ? frame_len - 14 : 0; }

/* A frame of [len] bytes arrives at [now]: its fate. */
static void arrive(struct dir *d, uint64_t now, long index, const unsigned char *frame, size_t len) {
  const struct spec *s = d->spec;
  d->bytes_in += len;
  if (len > d->max_frame) d->max_frame = len;
  double r_loss = uniform(d), r_dup = uniform(d), r_reorder = uniform(d), r_jitter = uniform(d);
  uint64_t due = now;
  d->in++;
  if (s->mtu > 0 && ip_length(len) > (size_t)s->mtu) {
    d->blackholed++;
    return;
  }
  if (r_loss < s->loss) {
    d->lost++;
    return;
  }
  if (s->rate > 0) {
    uint64_t start = d->link_free > now ? d->link_free : now;
    uint64_t backlog = (start - now) * s->rate / 8000000000ULL;
    if (backlog + len > s->queue) {
      d->queue_drops++;
      return;
    }
    d->link_free = start + (uint64_t)len * 8000000000ULL / s->rate;
    due = d->link_free;
  }
  due += s->delay + (uint64_t)(r_jitter * (double)s->jitter);
  if (r_reorder < s->reorder) {
    d->reordered++;
    due += s->reorder_delay;
  }
  hold(d, due, index, frame, len);
  if (r_dup < s->dup) {
    d->duplicated++;
    hold(d, due, index, frame, len);
  }
}

static void print_stats(const char *name, const struct dir *d, long socket_drops) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("STATS %s in=%ld out=%ld lost=%ld duplicated=%ld reordered=%ld blackholed=%ld queue_drops=%ld "
         "overflow=%ld write_drops=%ld socket_drops=%ld held=%zu bytes=%llu max_frame=%zu utime=%.6f stime=%.6f\n",
         name, d->in, d->out, d->lost, d->duplicated, d->reordered, d->blackholed, d->queue_drops,
         d->overflow, d->write_drops, socket_drops, d->held, (unsigned long long)d->bytes_in, d->max_frame, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
         ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
}

/* {1 Simulation on virtual time} */

static int simulate(const struct spec *s) {
  struct dir d;
  char line[256];
  long index = 0;
  uint64_t last = 0;
  dir_init(&d, s, 0);
  while (fgets(line, sizeof line, stdin)) {
    unsigned long long t_us;
    long len;
    if (sscanf(line, "%llu %ld", &t_us, &len) != 2 || len <= 0 || len > FRAME) fail("bad input line: %s", line);
    uint64_t now = (uint64_t)t_us * 1000;
    if (now < last) fail("arrival times must not decrease: %s", line);
    while (d.held > 0 && d.heap[0].due <= now) {
      struct held h = pop(&d);
      d.out++;
      printf("OUT %llu %ld\n", (unsigned long long)(h.due / 1000), h.index);
    }
    last = now;
    arrive(&d, now, index++, NULL, (size_t)len);
  }
  while (d.held > 0) {
    struct held h = pop(&d);
    d.out++;
    printf("OUT %llu %ld\n", (unsigned long long)(h.due / 1000), h.index);
  }
  print_stats("sim", &d, 0);
  return 0;
}

/* {1 The relay} */

struct port {
  int fd;
  int packet;        /* an AF_PACKET socket (else a TAP device) */
  long socket_drops; /* frames the socket dropped before we read them (AF_PACKET) */
};

static struct port open_port(const char *arg) {
  struct port p = {-1, 0, 0};
  if (strncmp(arg, "tap:", 4) == 0) {
    struct ifreq ifr;
    const char *name = arg + 4;
    if (strlen(name) == 0 || strlen(name) >= IFNAMSIZ) fail("bad TAP name: %s", arg);
    p.fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (p.fd < 0) fail("open /dev/net/tun: %s", strerror(errno));
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(p.fd, TUNSETIFF, &ifr) < 0) fail("TUNSETIFF: %s", strerror(errno));
  } else if (strncmp(arg, "packet:", 7) == 0) {
    struct sockaddr_ll sll;
    const char *name = arg + 7;
    struct ifreq ifr;
    int one = 1;
    if (strlen(name) == 0 || strlen(name) >= IFNAMSIZ) fail("bad interface name: %s", arg);
    p.packet = 1;
    p.fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (p.fd < 0) fail("AF_PACKET socket: %s", strerror(errno));
    memset(&ifr, 0, sizeof ifr);
    strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
    if (ioctl(p.fd, SIOCGIFINDEX, &ifr) < 0) fail("no interface %s", name);
    /* Only what the interface receives: not what we send on it. */
    if (setsockopt(p.fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0)
      fail("PACKET_IGNORE_OUTGOING: %s", strerror(errno));
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = ifr.ifr_ifindex;
    if (bind(p.fd, (struct sockaddr *)&sll, sizeof sll) < 0) fail("bind AF_PACKET: %s", strerror(errno));
    /* Room for bursts (a TAP device's queue holds 1000 frames): a frame
       the socket drops is a loss the SPEC did not ask for (counted). */
    int big = 16 << 20;
    if (setsockopt(p.fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
      setsockopt(p.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  } else
    fail("a port is tap:NAME or packet:NAME, not %s", arg);
  if (fcntl(p.fd, F_SETFL, O_NONBLOCK) < 0) fail("fcntl: %s", strerror(errno));
  return p;
}

static uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static unsigned char frame[FRAME];

/* Up to BATCH frames from [from] into its direction. */
static void take(struct port *from, struct dir *d) {
  for (int i = 0; i < BATCH; i++) {
    ssize_t n = read(from->fd, frame, sizeof frame);
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EINTR && errno != ENETDOWN) fail("read: %s", strerror(errno));
      return;
    }
    arrive(d, clock_ns(), (long)d->in, frame, (size_t)n);
  }
}

/* Every frame of [d] due by now, written to [to]. */
static void deliver(struct dir *d, struct port *to) {
  uint64_t now = clock_ns();
  while (d->held > 0 && d->heap[0].due <= now) {
    struct held h = pop(d);
    if (write(to->fd, h.data, h.len) == (ssize_t)h.len)
      d->out++;
    else
      d->write_drops++;
    free(h.data);
  }
}

static int relay(const struct spec *s, const char *a, const char *b) {
  struct port ports[2] = {open_port(a), open_port(b)};
  struct dir dirs[2];
  char line[256];
  dir_init(&dirs[0], s, 0);
  dir_init(&dirs[1], s, 1);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  printf("READY %s %s\n", a, b);
  fflush(stdout);
  for (;;) {
    struct pollfd p[3] = {{ports[0].fd, POLLIN, 0}, {ports[1].fd, POLLIN, 0}, {0, POLLIN, 0}};
    struct timespec ts, *tp = NULL;
    uint64_t now = clock_ns(), due = UINT64_MAX;
    for (int i = 0; i < 2; i++)
      if (dirs[i].held > 0 && dirs[i].heap[0].due < due) due = dirs[i].heap[0].due;
    if (due != UINT64_MAX) {
      uint64_t wait = due > now ? due - now : 0;
      ts.tv_sec = (time_t)(wait / 1000000000ULL);
      ts.tv_nsec = (long)(wait % 1000000000ULL);
      tp = &ts;
    }
    if (ppoll(p, 3, tp, NULL) < 0) {
      if (errno == EINTR) continue;
      fail("ppoll: %s", strerror(errno));
    }
    if (p[0].revents & POLLIN) take(&ports[0], &dirs[0]);
    if (p[1].revents & POLLIN) take(&ports[1], &dirs[1]);
    deliver(&dirs[0], &ports[1]);
    deliver(&dirs[1], &ports[0]);
    if (p[2].revents & (POLLIN | POLLHUP)) {
      ssize_t n = read(0, line, sizeof line);
      if (n <= 0) break;
      for (int i = 0; i < 2; i++)
        if (ports[i].packet) {
          struct tpacket_stats st;
          socklen_t len = sizeof st;
          /* Reading the counters resets them. */
          if (getsockopt(ports[i].fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
            ports[i].socket_drops += st.tp_drops;
        }
      print_stats("a_to_b", &dirs[0], ports[0].socket_drops);
      print_stats("b_to_a", &dirs[1], ports[1].socket_drops);
      fflush(stdout);
    }
  }
  close(ports[0].fd);
  close(ports[1].fd);
  return 0;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc == 5 && strcmp(argv[1], "relay") == 0) {
    struct spec s = parse_spec(argv[2]);
    return relay(&s, argv[3], argv[4]);
  }
  if (argc == 3 && strcmp(argv[1], "simulate") == 0) {
    struct spec s = parse_spec(argv[2]);
    return simulate(&s);
  }
  if (argc == 3 && strcmp(argv[1], "check") == 0) {
    struct spec s = parse_spec(argv[2]);
    print_spec(&s);
    return 0;
  }
  fprintf(stderr, "usage: %s relay SPEC PORT_A PORT_B | simulate SPEC | check SPEC\n", argv[0]);
  return 2;
}
