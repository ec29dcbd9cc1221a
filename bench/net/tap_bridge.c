/* A minimal TAP bridge, the baseline of the TCP benchmark: two TAP devices
   (IFF_TAP | IFF_NO_PI), and every frame read from one is written to the
   other, one read and one write per frame, as Consort's stack does on its
   TAP device. Non-blocking descriptors, poll(2), up to BATCH frames per
   descriptor per wake-up; a write the kernel refuses drops the frame.

     tap_bridge bridge NAME_A NAME_B
       creates both devices, prints "READY NAME_A NAME_B", then bridges
       until standard input closes; each line read on standard input is
       answered with "STATS a_to_b=N b_to_a=N drops=N wakeups=N utime=S
       stime=S" (cumulative; CPU seconds of this process).

     tap_bridge offload IFNAME
       turns TSO, GSO and GRO off on IFNAME through the ethtool ioctl (for
       machines without the ethtool program) and prints what the device
       reports afterwards: "OFFLOAD tso=0 gso=0 gro=0 tx_csum=N sg=N". */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 64
#define FRAME 65536

static int tap_open(const char *name) {
  struct ifreq ifr;
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    perror("open /dev/net/tun");
    exit(2);
  }
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    perror("TUNSETIFF");
    exit(2);
  }
  if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
    perror("fcntl");
    exit(2);
  }
  return fd;
}

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

static unsigned char frame[FRAME];
static long forwarded[2], drops, wakeups;

/* Up to BATCH frames from fds[from] into fds[1 - from]. */
static void pump(int *fds, int from) {
  for (int i = 0; i < BATCH; i++) {
    ssize_t n = read(fds[from], frame, sizeof frame);
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        perror("read");
        exit(2);
      }
      return;
    }
    if (write(fds[1 - from], frame, (size_t)n) == n)
      forwarded[from]++;
    else
      drops++;
  }
}

static int bridge(const char *a, const char *b) {
  int fds[2] = {tap_open(a), tap_open(b)};
  char line[256];
  printf("READY %s %s\n", a, b);
  fflush(stdout);
  for (;;) {
    struct pollfd p[3] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}, {0, POLLIN, 0}};
    if (poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      perror("poll");
      return 2;
    }
    wakeups++;
    if (p[0].revents & POLLIN) pump(fds, 0);
    if (p[1].revents & POLLIN) pump(fds, 1);
    if (p[2].revents & (POLLIN | POLLHUP)) {
      ssize_t n = read(0, line, sizeof line);
      if (n <= 0) break;
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      printf("STATS a_to_b=%ld b_to_a=%ld drops=%ld wakeups=%ld utime=%.6f stime=%.6f\n", forwarded[0],
             forwarded[1], drops, wakeups, seconds(ru.ru_utime), seconds(ru.ru_stime));
      fflush(stdout);
    }
  }
  close(fds[0]);
  close(fds[1]);
  return 0;
}

static int ethtool(int s, const char *name, __u32 cmd, __u32 *data, int set) {
  struct ifreq ifr;
  struct ethtool_value ev = {cmd, set ? *data : 0};
  memset(&ifr, 0, sizeof ifr);
  strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  ifr.ifr_data = (void *)&ev;
  if (ioctl(s, SIOCETHTOOL, &ifr) < 0) return -1;
  if (!set) *data = ev.data;
  return 0;
}

static int offload(const char *name) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  __u32 off = 0, tso = 9, gso = 9, gro = 9, csum = 9, sg = 9;
  if (s < 0) {
    perror("socket");
    return 2;
  }
  if (ethtool(s, name, ETHTOOL_STSO, &off, 1) < 0) perror("ETHTOOL_STSO");
  if (ethtool(s, name, ETHTOOL_SGSO, &off, 1) < 0) perror("ETHTOOL_SGSO");
  if (ethtool(s, name, ETHTOOL_SGRO, &off, 1) < 0) perror("ETHTOOL_SGRO");
  ethtool(s, name, ETHTOOL_GTSO, &tso, 0);
  ethtool(s, name, ETHTOOL_GGSO, &gso, 0);
  ethtool(s, name, ETHTOOL_GGRO, &gro, 0);
  ethtool(s, name, ETHTOOL_GTXCSUM, &csum, 0);
  ethtool(s, name, ETHTOOL_GSG, &sg, 0);
  printf("OFFLOAD tso=%u gso=%u gro=%u tx_csum=%u sg=%u\n", tso, gso, gro, csum, sg);
  close(s);
  return (tso == 0 && gso == 0 && gro == 0) ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "bridge") == 0) return bridge(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "offload") == 0) return offload(argv[2]);
  fprintf(stderr, "usage: %s bridge TAP_A TAP_B | offload IFNAME\n", argv[0]);
  return 2;
}
