/* Kernel TCP ends of the impaired TCP benchmark, over IPv4 or IPv6, with
   SHA-256 (OpenSSL's) of every byte sent and received. Bounded in time
   (SECONDS); each prints one line "RESULT key=value ..." on success.

     hash_peer sink PORT SECONDS
       listens on every address, IPv4 and IPv6 (prints "LISTENING"),
       accepts one connection and reads it to the end; bytes=, secs= (first
       byte to end of stream), sha256=.
     hash_peer source HOST PORT BYTES SECONDS [CC]
       connects to HOST (an IPv4 or IPv6 address; refused connections are
       retried), writes BYTES of pseudo-random data, shuts down its side and
       waits for the peer's end; bytes=, secs= (connected to the peer's
       end), sha256=, cc= (the socket's congestion control: CC if given,
       set with TCP_CONGESTION, else the namespace's default).
     hash_peer cc CC
       exits 0 if a TCP socket takes congestion control CC, else says why.
     hash_peer digest
       reads its standard input to the end: bytes=, sha256= (how Consort's
       end of the benchmark digests its stream, as the kernel's ends do).

   Exits 1 (one line on standard error) when out of time, 2 on an error. */

#define _GNU_SOURCE
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <unistd.h>

#define PEER_PREFIX "hash_peer: "
#include "peer_common.h"

#define CHUNK (256 * 1024)

static unsigned char buf[CHUNK];

static void out_of_time(const char *who) {
  fprintf(stderr, "hash_peer: %s: out of time\n", who);
  exit(1);
}

/* One read into [buf], retried when interrupted; out of time or an error
   ends the program. */
static ssize_t read_some(int s, const char *who) {
  for (;;) {
    ssize_t k = read(s, buf, sizeof buf);
    if (k >= 0) return k;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) out_of_time(who);
    die("read");
  }
}

static void hex(const unsigned char *d, unsigned n, char *out) {
  for (unsigned i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void finish(EVP_MD_CTX *ctx, char *out) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (EVP_DigestFinal_ex(ctx, d, &n) != 1) die("SHA-256");
  hex(d, n, out);
}

static EVP_MD_CTX *sha256(void) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) die("SHA-256");
  return ctx;
}

/* Closes [s] and prints the RESULT line: [bytes], the seconds since [t0],
   the SHA-256 of [ctx] and the CPU time since [u0], [s0]. */
static int report(int s, long long bytes, double t0, double u0, double s0, EVP_MD_CTX *ctx) {
  char digest[2 * EVP_MAX_MD_SIZE + 1], cc[32] = "unknown";
  socklen_t cc_len = sizeof cc - 1;
  double t1 = now(), u1, s1;
  cpu(&u1, &s1);
  if (getsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, &cc_len) == 0) cc[cc_len] = 0;
  cc[strcspn(cc, " \t\n")] = 0;
  close(s);
  finish(ctx, digest);
  printf("RESULT bytes=%lld secs=%.6f sha256=%s utime=%.6f stime=%.6f cc=%s\n", bytes, t1 - t0, digest, u1 - u0,
         s1 - s0, cc[0] ? cc : "unknown");
  return 0;
}

static int sink(int port, double secs) {
  struct sockaddr_in6 a;
  int one = 1, zero = 0, l = socket(AF_INET6, SOCK_STREAM, 0), s;
  double u0, s0, t0 = 0, deadline = now() + secs;
  long long bytes = 0;
  EVP_MD_CTX *ctx = sha256();
  if (l < 0) die("socket");
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  memset(&a, 0, sizeof a);
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(port);
  a.sin6_addr = in6addr_any;
  listen_announce(l, (struct sockaddr *)&a, sizeof a, port, secs);
  s = accept(l, NULL, NULL);
  if (s < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) out_of_time("sink accept");
    die("accept");
  }
  close(l);
  timeouts(s, secs);
  cpu(&u0, &s0);
  for (;;) {
    ssize_t k = read_some(s, "sink");
    if (k == 0) break;
    if (bytes == 0) t0 = now();
    bytes += k;
    EVP_DigestUpdate(ctx, buf, (size_t)k);
    if (now() > deadline) out_of_time("sink");
  }
  return report(s, bytes, t0, u0, s0, ctx);
}

static int connect_to(const char *host, int port, double secs, const char *cc) {
  struct addrinfo hints, *ai;
  char service[16];
  double deadline = now() + secs;
  int rc;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  snprintf(service, sizeof service, "%d", port);
  if ((rc = getaddrinfo(host, service, &hints, &ai)) != 0) {
    fprintf(stderr, "hash_peer: %s: %s\n", host, gai_strerror(rc));
    exit(2);
  }
  for (;;) {
    int s = socket(ai->ai_family, SOCK_STREAM, 0);
    if (s < 0) die("socket");
    timeouts(s, secs);
    if (cc && setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc)) < 0) {
      fprintf(stderr, "hash_peer: congestion control %s: %s\n", cc, strerror(errno));
      exit(2);
    }
    if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
      freeaddrinfo(ai);
      return s;
    }
    if (errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH) die("connect");
    if (now() > deadline) out_of_time("connect");
    close(s);
    usleep(20000);
  }
}

static int source(const char *host, int port, long long total, double secs, const char *cc) {
  int s = connect_to(host, port, secs, cc);
  double u0, s0, t0 = now(), deadline = t0 + secs;
  long long bytes = 0;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  EVP_MD_CTX *ctx = sha256();
  for (size_t i = 0; i + 8 <= sizeof buf; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(buf + i, &x, 8);
  }
  cpu(&u0, &s0);
  for (uint64_t chunk = 0; bytes < total; chunk++) {
    size_t n = total - bytes < (long long)sizeof buf ? (size_t)(total - bytes) : sizeof buf, put = 0;
    /* Every chunk differs: its number in its first bytes. */
    memcpy(buf, &chunk, n < 8 ? n : 8);
    EVP_DigestUpdate(ctx, buf, n);
    while (put < n) {
      ssize_t k = write(s, buf + put, n - put);
      if (k < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) out_of_time("source");
        die("write");
      }
      put += (size_t)k;
    }
    bytes += (long long)n;
    if (now() > deadline) out_of_time("source");
  }
  shutdown(s, SHUT_WR);
  while (read_some(s, "source") > 0) {
  }
  return report(s, bytes, t0, u0, s0, ctx);
}

static int cc_check(const char *cc) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) die("socket");
  if (setsockopt(s, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc)) < 0) {
    fprintf(stderr, "hash_peer: congestion control %s: %s\n", cc, strerror(errno));
    return 2;
  }
  close(s);
  return 0;
}

/* Standard input to its end: its length and SHA-256. */
static int digest(void) {
  EVP_MD_CTX *ctx = sha256();
  long long bytes = 0;
  char d[2 * EVP_MAX_MD_SIZE + 1];
  for (;;) {
    ssize_t k = read(0, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) die("read");
    if (k == 0) break;
    if (EVP_DigestUpdate(ctx, buf, (size_t)k) != 1) die("SHA-256");
    bytes += k;
  }
  finish(ctx, d);
  EVP_MD_CTX_free(ctx);
  printf("RESULT bytes=%lld sha256=%s\n", bytes, d);
  return fflush(stdout) == 0 ? 0 : 2;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "digest") == 0) return digest();
  if (argc == 3 && strcmp(argv[1], "cc") == 0) return cc_check(argv[2]);
  if (argc == 4 && strcmp(argv[1], "sink") == 0) return sink(atoi(argv[2]), atof(argv[3]));
  if ((argc == 6 || argc == 7) && strcmp(argv[1], "source") == 0)
    return source(argv[2], atoi(argv[3]), atoll(argv[4]), atof(argv[5]), argc == 7 ? argv[6] : NULL);
  fprintf(stderr, "usage: %s sink PORT SECONDS | source HOST PORT BYTES SECONDS [CC] | cc CC\n", argv[0]);
  return 2;
}
