/* consort-exec: consort cap exec through this user's agent (consort cap agent), else through the
   OCaml client consort-exec-ml beside this binary, run with the same arguments.

   A small C program that links neither libcrypto nor the OCaml runtime: it finds the agent's
   socket (CONSORT_AGENT, else $XDG_RUNTIME_DIR/consort/agent.sock, else
   ~/.consort/agent.sock), checks that the agent runs as this user (SO_PEERCRED), and sends it
   the command line, the variables the command reads (HOME, CONSORT_ROOT, CONSORT_LOCATE,
   CONSORT_MULTICAST), ~/.consort/root's contents, and its standard input, output and error
   (SCM_RIGHTS). The agent runs the command with them; its exit status comes back. Nothing is
   sent to an agent of another user. Whenever the agent cannot be used (none runs, CONSORT_AGENT
   is "off", a standard stream is closed, the agent is busy or would not run the command exactly
   as the client would), the OCaml client runs instead, before anything was done: its output and
   exit status are today's. Once the request is sent, an agent that stops before answering
   leaves the outcome unknown: exit 3, as when the process server becomes unreachable. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_BODY 65536 /* as the agent's */
#define MAX_ROOT_FILE 16384

static char **saved_argv;

/* The OCaml client, beside this binary: installed as consort-exec-ml, in the build tree as
   consort_exec_ml.exe. */
static void fallback(void)
{
  static const char *names[] = {"consort-exec-ml", "consort_exec_ml.exe"};
  char self[PATH_MAX], path[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    char *slash;
    self[n] = '\0';
    slash = strrchr(self, '/');
    if (slash != NULL) {
      *slash = '\0';
      for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", self, names[i]);
        execv(path, saved_argv);
      }
    }
  }
  fprintf(stderr, "consort: consort-exec-ml is not beside consort-exec (%s)\n", strerror(errno));
  exit(2);
}

struct buf {
  unsigned char *p;
  size_t len, cap;
  int overflow;
};

static void put(struct buf *b, const void *s, size_t n)
{
  if (b->overflow || b->len + n > b->cap) {
    b->overflow = 1;
    return;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void put_u32(struct buf *b, uint32_t v)
{
  unsigned char c[4] = {v >> 24, v >> 16, v >> 8, v};
  put(b, c, 4);
}

static void put_str(struct buf *b, const char *s, size_t n)
{
  put_u32(b, (uint32_t)n);
  put(b, s, n);
}

static void put_opt(struct buf *b, const char *s, size_t n)
{
  unsigned char c = s != NULL;
  put(b, &c, 1);
  if (s != NULL) put_str(b, s, n);
}

static void put_env(struct buf *b, const char *name)
{
  const char *v = getenv(name);
  put_opt(b, v, v ? strlen(v) : 0);
}

/* ~/.consort/root as the command would read it: absent, or its contents. Anything else (a
   directory, unreadable, too large, a NUL in it) is left to the OCaml client. */
static int read_root_file(char *out, size_t *len)
{
  const char *home = getenv("HOME");
  char path[PATH_MAX];
  struct stat st;
  int fd;
  size_t got = 0;
  if (home == NULL) return 0;
  if ((size_t)snprintf(path, sizeof path, "%s/.consort/root", home) >= sizeof path) fallback();
  if (stat(path, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return 0;
    fallback();
  }
  if (!S_ISREG(st.st_mode)) fallback();
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fallback();
  for (;;) {
    ssize_t n = read(fd, out + got, MAX_ROOT_FILE - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fallback();
    if (n == 0) break;
    got += n;
    if (got == MAX_ROOT_FILE) fallback();
  }
  close(fd);
  if (memchr(out, '\0', got) != NULL) fallback();
  *len = got;
  return 1;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
  (void)sig;
  interrupted = 1;
}

static int send_all(int s, const unsigned char *p, size_t n)
{
  while (n > 0) {
    ssize_t k = send(s, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= k;
  }
  return 0;
}

int main(int argc, char **argv)
{
  static unsigned char body[MAX_BODY + 8];
  static char root[MAX_ROOT_FILE];
  struct buf b = {body, 8, sizeof body, 0};
  const char *agent = getenv("CONSORT_AGENT");
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  struct sockaddr_un sa;
  struct ucred cr;
  socklen_t crlen = sizeof cr;
  size_t root_len = 0;
  int s, i, have_root;
  char reply[512];
  size_t rlen = 0;
  struct sigaction act;

  saved_argv = argv;
  /* A closed standard stream: the OCaml client says what it says today. */
  for (i = 0; i < 3; i++)
    if (fcntl(i, F_GETFD) < 0) fallback();
  if (agent != NULL && strcmp(agent, "off") == 0) fallback();
  if (agent != NULL && agent[0] != '\0') {
    if ((size_t)snprintf(path, sizeof path, "%s", agent) >= sizeof path) fallback();
  } else {
    const char *xdg = getenv("XDG_RUNTIME_DIR"), *home = getenv("HOME");
    if (xdg != NULL && xdg[0] == '/') {
      if ((size_t)snprintf(path, sizeof path, "%s/consort/agent.sock", xdg) >= sizeof path)
        fallback();
    } else if (home != NULL && home[0] == '/') {
      if ((size_t)snprintf(path, sizeof path, "%s/.consort/agent.sock", home) >= sizeof path)
        fallback();
    } else
      fallback();
  }
  s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) fallback();
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(s);
    fallback();
  }
  /* Only an agent of this user gets the capabilities. */
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) != 0 || crlen != sizeof cr ||
      cr.uid != geteuid()) {
    close(s);
    fallback();
  }
  have_root = read_root_file(root, &root_len);
  put_env(&b, "HOME");
  put_env(&b, "CONSORT_ROOT");
  put_env(&b, "CONSORT_LOCATE");
  put_env(&b, "CONSORT_MULTICAST");
  put_opt(&b, have_root ? root : NULL, root_len);
  put_u32(&b, (uint32_t)argc);
  for (i = 0; i < argc; i++) put_str(&b, argv[i], strlen(argv[i]));
  if (b.overflow || b.len - 8 > MAX_BODY || argc > 1024) {
    close(s);
    fallback();
  }
  memcpy(body, "CXA1", 4);
  {
    uint32_t l = (uint32_t)(b.len - 8);
    body[4] = l >> 24;
    body[5] = l >> 16;
    body[6] = l >> 8;
    body[7] = l;
  }
  /* Ctrl-C from here on is the program's: passed on as 'I'. */
  memset(&act, 0, sizeof act);
  act.sa_handler = on_sigint;
  sigemptyset(&act.sa_mask);
  sigaction(SIGINT, &act, NULL);
  {
    int fds[3] = {0, 1, 2};
    union {
      char buf[CMSG_SPACE(sizeof fds)];
      struct cmsghdr align;
    } u;
    struct msghdr mh;
    struct iovec iov = {body, b.len};
    struct cmsghdr *ch;
    ssize_t k;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(ch), fds, sizeof fds);
    do k = sendmsg(s, &mh, MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    /* Not sent whole: the agent runs nothing of it. */
    if (k <= 0 || send_all(s, body + k, b.len - k) != 0) {
      close(s);
      fallback();
    }
  }
  for (;;) {
    struct pollfd p = {s, POLLIN, 0};
    ssize_t k;
    if (interrupted) {
      interrupted = 0;
      send(s, "I", 1, MSG_NOSIGNAL);
    }
    if (poll(&p, 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    k = read(s, reply + rlen, sizeof reply - 1 - rlen);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    rlen += k;
    if (memchr(reply, '\n', rlen) != NULL || rlen == sizeof reply - 1) break;
  }
  reply[rlen] = '\0';
  if (rlen >= 2 && reply[rlen - 1] == '\n') {
    reply[rlen - 1] = '\0';
    if (reply[0] == 'F' && reply[1] == '\0') {
      close(s);
      fallback();
    }
    if (reply[0] == 'E') {
      fprintf(stderr, "consort: agent: %s\n", reply + 1);
      return 2;
    }
    if (reply[0] == 'X') {
      char *end;
      long code = strtol(reply + 1, &end, 10);
      if (end != reply + 1 && *end == '\0' && code >= 0 && code <= 255) return (int)code;
    }
  }
  fprintf(stderr, "consort: exec: outcome unknown: the agent stopped without an answer\n");
  return 3;
}
