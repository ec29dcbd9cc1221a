/* Starting a program as a child with resource limits, and signal numbers. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>

#include <sys/mman.h>
#define CAML_INTERNALS
#include <caml/version.h>
#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/unixsupport.h>
#if OCAML_VERSION_MAJOR < 5
#include <caml/domain_state.h>
#include <caml/major_gc.h>
#endif
#include <stdint.h>

extern int caml_convert_signal_number(int);
extern int caml_rev_convert_signal_number(int);

static char **to_cstrings(value arr)
{
  mlsize_t n = Wosize_val(arr), i;
  char **r = malloc((n + 1) * sizeof(char *));
  if (r == NULL) return NULL;
  for (i = 0; i < n; i++) r[i] = (char *)String_val(Field(arr, i));
  r[n] = NULL;
  return r;
}

/* spawn prog argv envp [|in; out; err|] [|cpu_seconds; as_bytes|]: the
   child's pid. The child gets its own process group, the three descriptors
   as 0, 1, 2, no other descriptor, RLIMIT_CPU (soft cpu, hard cpu + 1: SIGXCPU
   then SIGKILL), RLIMIT_AS, no core files; 0 means no limit. */
CAMLprim value consort_proc_spawn(value prog, value argv, value envp, value fds, value limits)
{
  CAMLparam5(prog, argv, envp, fds, limits);
  char **cargv = to_cstrings(argv);
  char **cenvp = to_cstrings(envp);
  int fd[3];
  long cpu = Long_val(Field(limits, 0)), as = Long_val(Field(limits, 1));
  int deathsig = Wosize_val(limits) > 2 ? Int_val(Field(limits, 2)) : 0;
  pid_t parent = getpid();
  pid_t pid;
  int i;
  if (cargv == NULL || cenvp == NULL) {
    free(cargv);
    free(cenvp);
    caml_raise_out_of_memory();
  }
  for (i = 0; i < 3; i++) fd[i] = Int_val(Field(fds, i));
  pid = fork();
  if (pid == 0) {
    struct rlimit rl;
    sigset_t none;
    setpgid(0, 0);
    if (deathsig > 0) {
      prctl(PR_SET_PDEATHSIG, deathsig);
      if (getppid() != parent) _exit(126);
    }
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (i = 1; i < NSIG; i++) signal(i, SIG_DFL);
    /* Move the three out of the way of 0..2, then into place. */
    for (i = 0; i < 3; i++) {
      int d = fcntl(fd[i], F_DUPFD, 10);
      if (d < 0) _exit(126);
      fd[i] = d;
    }
    for (i = 0; i < 3; i++)
      if (dup2(fd[i], i) < 0) _exit(126);
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3, ~0U, 0) != 0)
#endif
      for (i = 3; i < 65536; i++) close(i);
    rl.rlim_cur = 0;
    rl.rlim_max = 0;
    setrlimit(RLIMIT_CORE, &rl);
    if (cpu > 0) {
      rl.rlim_cur = cpu;
      rl.rlim_max = cpu + 1;
      if (setrlimit(RLIMIT_CPU, &rl) != 0) _exit(126);
    }
    if (as > 0) {
      rl.rlim_cur = as;
      rl.rlim_max = as;
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
    }
    execve(String_val(prog), cargv, cenvp);
    _exit(127);
  }
  free(cargv);
  free(cenvp);
  if (pid < 0) uerror("fork", Nothing);
  CAMLreturn(Val_int(pid));
}

/* Confined start (the process server).

   consort_proc_spawn_confined prog argv envp fds opts strs: [(pid, how)].
   fds: [|stdin; stdout; stderr; caps (-1: none, else fd 3); program (-1, else
   fd 4); status (the write end of a pipe: the program's wait status, 4 bytes
   little-endian, when a PID namespace's init reports it); error (the write end
   of a close-on-exec pipe: "STAGE ERRNO" if the start fails)|].
   opts: [|cpu_seconds; as_bytes; deathsig; uid (-1: keep); gid; nproc (0: no
   rlimit); nofile; newpid (1: try a PID and mount namespace)|].
   strs: [|cwd; cgroup.procs files to join ...|].
   how: 1 if the child is the init of a new PID namespace (with its own /proc),
   0 if it is a plain child in its own process group. */

static void fail_stage(int errfd, const char *stage)
{
  char buf[256];
  int n = snprintf(buf, sizeof buf, "%s: %s", stage, strerror(errno));
  if (n > 0 && write(errfd, buf, n < (int)sizeof buf ? n : (int)sizeof buf - 1) < 0) {
    /* nothing more to do */
  }
  _exit(126);
}

/* The first steps of a confined start, those that need nothing of the
   program: its own process group, default signals, its cgroups (the first
   thing: everything it starts is counted), and in a new PID namespace a
   /proc of its own. */
static void confined_prepare(int newpid, int errfd, char **cgroups, int ncgroups)
{
  sigset_t none;
  int i;
  setpgid(0, 0);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (i = 1; i < NSIG; i++) signal(i, SIG_DFL);
  for (i = 0; i < ncgroups; i++) {
    int c = open(cgroups[i], O_WRONLY | O_CLOEXEC);
    if (c < 0) fail_stage(errfd, "cgroup");
    if (write(c, "0", 1) != 1) fail_stage(errfd, "cgroup");
    close(c);
  }
  if (newpid) {
    /* Our own /proc: only this namespace's processes are visible. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail_stage(errfd, "mount-private");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
      fail_stage(errfd, "mount-proc");
  }
}

/* The rest, once the program is known: descriptors, limits, directory,
   user, death signal, no-new-privileges, then the program (in a namespace,
   started by this process as its init). */
static void confined_finish(int newpid, pid_t parent, const char *prog, char **cargv,
                            char **cenvp, int *fd, long *o, const char *cwd)
{
  struct rlimit rl;
  int i, errfd = fd[6];
  volatile int statusfd = fd[5]; /* read after vfork */
  long cpu = o[0], as = o[1];
  int deathsig = (int)o[2];
  long uid = o[3], gid = o[4], nproc = o[5], nofile = o[6];
  /* Move the descriptors out of the way of 0..4, then into place. */
  for (i = 0; i < 7; i++) {
    if (fd[i] < 0) continue;
    {
      int d = fcntl(fd[i], F_DUPFD_CLOEXEC, 10);
      if (d < 0) fail_stage(errfd, "dup");
      fd[i] = d;
    }
  }
  errfd = fd[6];
  for (i = 0; i < 5; i++) {
    if (fd[i] >= 0) {
      if (dup2(fd[i], i) < 0) fail_stage(errfd, "dup2");
    } else if (i >= 3)
      close(i);
  }
  /* The error pipe at 5, the status pipe at 6 (both close-on-exec), and no
     other descriptor. */
  if (dup3(errfd, 5, O_CLOEXEC) < 0) fail_stage(errfd, "dup2");
  errfd = 5;
  if (fd[5] >= 0) {
    if (dup3(fd[5], 6, O_CLOEXEC) < 0) fail_stage(errfd, "dup2");
    statusfd = 6;
  } else {
    close(6);
    statusfd = -1;
  }
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 7, ~0U, 0) != 0)
#endif
    for (i = 7; i < 65536; i++) close(i);
  rl.rlim_cur = 0;
  rl.rlim_max = 0;
  setrlimit(RLIMIT_CORE, &rl);
  if (cpu > 0) {
    rl.rlim_cur = cpu;
    rl.rlim_max = cpu + 1;
    if (setrlimit(RLIMIT_CPU, &rl) != 0) fail_stage(errfd, "rlimit-cpu");
  }
  if (as > 0) {
    rl.rlim_cur = as;
    rl.rlim_max = as;
    if (setrlimit(RLIMIT_AS, &rl) != 0) fail_stage(errfd, "rlimit-as");
  }
  if (nofile > 0) {
    rl.rlim_cur = nofile;
    rl.rlim_max = nofile;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) fail_stage(errfd, "rlimit-nofile");
  }
  if (nproc > 0) {
    rl.rlim_cur = nproc;
    rl.rlim_max = nproc;
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) fail_stage(errfd, "rlimit-nproc");
  }
  if (cwd[0] != '\0' && chdir(cwd) != 0) fail_stage(errfd, "chdir");
  if (gid >= 0) {
    if (setgroups(0, NULL) != 0) fail_stage(errfd, "setgroups");
    if (setresgid(gid, gid, gid) != 0) fail_stage(errfd, "setgid");
  }
  if (uid >= 0) {
    if (setresuid(uid, uid, uid) != 0) fail_stage(errfd, "setuid");
    /* Dropped for good. */
    if (uid != 0 && (setuid(0) == 0 || geteuid() == 0)) fail_stage(errfd, "setuid-kept");
  }
  /* After the user changed (a change of credentials clears it). In a new
     PID namespace the parent is outside (getppid() is 0): its death kills
     this init, and with it the namespace. */
  if (deathsig > 0) {
    if (prctl(PR_SET_PDEATHSIG, deathsig) != 0) fail_stage(errfd, "pdeathsig");
    if (!newpid && getppid() != parent) _exit(126);
  }
  /* No set-user-ID program gives the power back. */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_stage(errfd, "no-new-privs");
  if (!newpid) {
    if (statusfd >= 0) close(statusfd);
    execve(prog, cargv, cenvp);
    fail_stage(errfd, "exec");
  } else {
    /* The namespace's init: starts the program, reaps every orphan, and
       reports the program's wait status; when it exits, the kernel kills
       whatever is left in the namespace. */
    /* vfork: the program's process shares this one's memory until its
       exec, so no page table is copied. */
    pid_t child = vfork();
    int st = 0;
    if (child < 0) fail_stage(errfd, "fork");
    if (child == 0) {
      close(statusfd);
      execve(prog, cargv, cenvp);
      fail_stage(errfd, "exec");
    }
    close(errfd);
    for (i = 0; i < 5; i++) close(i);
    for (;;) {
      int s;
      pid_t w = waitpid(-1, &s, 0);
      if (w < 0) {
        if (errno == EINTR) continue;
        _exit(125);
      }
      if (w == child) {
        st = s;
        break;
      }
    }
    {
      unsigned char b[4];
      b[0] = st & 0xff;
      b[1] = (st >> 8) & 0xff;
      b[2] = (st >> 16) & 0xff;
      b[3] = (st >> 24) & 0xff;
      if (write(statusfd, b, 4) != 4) _exit(125);
    }
    _exit(0);
  }
}

static void confined_child(int newpid, pid_t parent, const char *prog, char **cargv,
                           char **cenvp, int *fd, long *o, char **cstrs, int nstrs)
{
  confined_prepare(newpid, fd[6], cstrs + 1, nstrs - 1);
  confined_finish(newpid, parent, prog, cargv, cenvp, fd, o, cstrs[0]);
}

CAMLprim value consort_proc_spawn_confined_native(value prog, value argv, value envp, value fds,
                                                  value opts, value strs)
{
  CAMLparam5(prog, argv, envp, fds, opts);
  CAMLxparam1(strs);
  CAMLlocal1(res);
  char **cargv = to_cstrings(argv);
  char **cenvp = to_cstrings(envp);
  char **cstrs = to_cstrings(strs);
  int nstrs = Wosize_val(strs);
  int fd[7];
  long o[8];
  int i, newpid, how = 0;
  pid_t parent = getpid();
  pid_t pid = -1;
  char *cprog = strdup(String_val(prog));
  if (cargv == NULL || cenvp == NULL || cstrs == NULL || cprog == NULL || nstrs < 1) {
    free(cargv);
    free(cenvp);
    free(cstrs);
    free(cprog);
    caml_raise_out_of_memory();
  }
  for (i = 0; i < 7; i++) fd[i] = Int_val(Field(fds, i));
  for (i = 0; i < 8; i++) o[i] = Long_val(Field(opts, i));
  newpid = o[7] == 1;
  if (newpid) {
    pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) confined_child(1, parent, cprog, cargv, cenvp, fd, o, cstrs, nstrs);
    if (pid > 0) how = 1;
  }
  if (pid < 0) {
    pid = fork();
    if (pid == 0) confined_child(0, parent, cprog, cargv, cenvp, fd, o, cstrs, nstrs);
  }
  free(cargv);
  free(cenvp);
  free(cstrs);
  free(cprog);
  if (pid < 0) uerror("fork", Nothing);
  res = caml_alloc_tuple(2);
  Store_field(res, 0, Val_int(pid));
  Store_field(res, 1, Val_int(how));
  CAMLreturn(res);
}

CAMLprim value consort_proc_spawn_confined(value *argv, int argn)
{
  (void)argn;
  return consort_proc_spawn_confined_native(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5]);
}

/* Spares: a confined child made before its program is known, so that what
   is slow in a start is done beforehand. Joining a cgroup v1 hierarchy waits
   for an RCU grace period (milliseconds: the kernel's cgroup_threadgroup_rwsem
   taken for writing), and a clone copies the server's page tables; a spare
   has done both, and a mount namespace with its own /proc, when a program
   comes. It waits on a socket for the program (descriptors, limits, user,
   directory, argv, environment) and goes on as consort_proc_spawn_confined's
   child would; it dies with the server (death signal, and end of file on
   its socket). Each spare serves one program.

   consort_proc_spare_make opts cgroups: (pid, how, socket). opts: [|deathsig;
   newpid|]; cgroups: the cgroup.procs files it joins. Once ready the spare
   writes "R" on its socket, or "STAGE: ERROR" and exits. */

struct spare_cmd {
  long o[8];
  int fdmask; /* which of the 7 descriptors of consort_proc_spawn_confined come, in order */
  int nargv;
  int nenv;
  int len; /* the strings that follow: prog, cwd, argv..., env..., each ending with a NUL */
};

#define SPARE_MAX_STRINGS (64 * 1024 * 1024)

static int read_full(int fd, char *b, size_t n)
{
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void spare_child(int newpid, pid_t parent, int deathsig, int sock, char **cgroups,
                        int ncgroups)
{
  struct spare_cmd cmd;
  struct msghdr mh;
  struct iovec iov;
  union {
    char buf[CMSG_SPACE(7 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct cmsghdr *ch;
  int got[7], ngot = 0, fd[7], i, k, null;
  ssize_t n;
  char *strs, *q, **cargv, **cenvp, *prog, *cwd;
  /* The server's death before a program came: this goes too. */
  if (deathsig > 0) {
    prctl(PR_SET_PDEATHSIG, deathsig);
    if (!newpid && getppid() != parent) _exit(126);
  }
  /* The socket at 3, standard streams on /dev/null, nothing else of the server's. */
  if (sock != 3) {
    if (dup3(sock, 3, O_CLOEXEC) < 0) _exit(126);
    sock = 3;
  }
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 4, ~0U, 0) != 0)
#endif
    for (i = 4; i < 65536; i++) close(i);
  null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) fail_stage(sock, "dev-null");
  for (i = 0; i < 3; i++)
    if (dup2(null, i) < 0) fail_stage(sock, "dup2");
  close(null);
  confined_prepare(newpid, sock, cgroups, ncgroups);
  if (write(sock, "R", 1) != 1) _exit(126);
  /* The program. */
  memset(&mh, 0, sizeof mh);
  iov.iov_base = &cmd;
  iov.iov_len = sizeof cmd;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof u.buf;
  do n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof cmd) _exit(0); /* the server is gone, or discarded this spare */
  for (ch = CMSG_FIRSTHDR(&mh); ch != NULL; ch = CMSG_NXTHDR(&mh, ch))
    if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS) {
      int m = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (i = 0; i < m && ngot < 7; i++) memcpy(&got[ngot++], CMSG_DATA(ch) + i * sizeof(int), sizeof(int));
    }
  for (i = 0, k = 0; i < 7; i++) fd[i] = (cmd.fdmask & (1 << i)) && k < ngot ? got[k++] : -1;
  if (fd[6] < 0 || cmd.len <= 0 || cmd.len > SPARE_MAX_STRINGS || cmd.nargv < 1 || cmd.nenv < 0 ||
      cmd.nargv + cmd.nenv + 2 > cmd.len)
    _exit(126);
  strs = malloc((size_t)cmd.len + 1);
  cargv = malloc(((size_t)cmd.nargv + 1) * sizeof(char *));
  cenvp = malloc(((size_t)cmd.nenv + 1) * sizeof(char *));
  if (strs == NULL || cargv == NULL || cenvp == NULL) fail_stage(fd[6], "malloc");
  if (read_full(sock, strs, (size_t)cmd.len) != 0) _exit(126);
  strs[cmd.len] = '\0';
  q = strs;
#define NEXT_STRING(dst)                                              \
  do {                                                                \
    if (q >= strs + cmd.len) _exit(126);                              \
    (dst) = q;                                                        \
    q += strlen(q) + 1;                                               \
  } while (0)
  NEXT_STRING(prog);
  NEXT_STRING(cwd);
  for (i = 0; i < cmd.nargv; i++) NEXT_STRING(cargv[i]);
  cargv[cmd.nargv] = NULL;
  for (i = 0; i < cmd.nenv; i++) NEXT_STRING(cenvp[i]);
  cenvp[cmd.nenv] = NULL;
#undef NEXT_STRING
  confined_finish(newpid, parent, prog, cargv, cenvp, fd, cmd.o, cwd);
  _exit(126);
}

CAMLprim value consort_proc_spare_make(value opts, value cgroups)
{
  CAMLparam2(opts, cgroups);
  CAMLlocal1(res);
  char **ccg = to_cstrings(cgroups);
  int ncg = Wosize_val(cgroups);
  int deathsig = Int_val(Field(opts, 0)), newpid = Int_val(Field(opts, 1)) == 1;
  int sv[2], how = 0;
  pid_t parent = getpid(), pid = -1;
  if (ccg == NULL) caml_raise_out_of_memory();
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    free(ccg);
    uerror("socketpair", Nothing);
  }
  if (newpid) {
    pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) spare_child(1, parent, deathsig, sv[1], ccg, ncg);
    if (pid > 0) how = 1;
  }
  if (pid < 0) {
    pid = fork();
    if (pid == 0) spare_child(0, parent, deathsig, sv[1], ccg, ncg);
  }
  free(ccg);
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    uerror("fork", Nothing);
  }
  res = caml_alloc_tuple(3);
  Store_field(res, 0, Val_int(pid));
  Store_field(res, 1, Val_int(how));
  Store_field(res, 2, Val_int(sv[0]));
  CAMLreturn(res);
}

/* consort_proc_spare_start sock prog argv envp fds opts cwd: waits until the
   spare is ready, then hands it the program (fds and opts as for
   consort_proc_spawn_confined; opts' newpid is the spare's). Failure with the
   spare's own words if it could not get ready. */
CAMLprim value consort_proc_spare_start_native(value sock, value prog, value argv, value envp,
                                               value fds, value opts, value cwd)
{
  CAMLparam5(sock, prog, argv, envp, fds);
  CAMLxparam2(opts, cwd);
  int s = Int_val(sock), i, k = 0;
  char ready[256];
  ssize_t n;
  struct spare_cmd cmd;
  struct msghdr mh;
  struct iovec iov;
  union {
    char buf[CMSG_SPACE(7 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct cmsghdr *ch;
  int send_fds[7];
  size_t len = 0, off;
  char *strs;
  mlsize_t na = Wosize_val(argv), ne = Wosize_val(envp);
  do n = read(s, ready, sizeof ready - 1);
  while (n < 0 && errno == EINTR);
  if (n < 0) uerror("read", Nothing);
  if (n != 1 || ready[0] != 'R') {
    if (n == 0) caml_failwith("spare: gone before its program came");
    ready[n] = '\0';
    caml_failwith(ready);
  }
  memset(&cmd, 0, sizeof cmd);
  for (i = 0; i < 8; i++) cmd.o[i] = Long_val(Field(opts, i));
  for (i = 0; i < 7; i++) {
    int f = Int_val(Field(fds, i));
    if (f >= 0) {
      cmd.fdmask |= 1 << i;
      send_fds[k++] = f;
    }
  }
  len = strlen(String_val(prog)) + 1 + strlen(String_val(cwd)) + 1;
  for (i = 0; i < (int)na; i++) len += strlen(String_val(Field(argv, i))) + 1;
  for (i = 0; i < (int)ne; i++) len += strlen(String_val(Field(envp, i))) + 1;
  if (na < 1 || len > SPARE_MAX_STRINGS) caml_invalid_argument("spare: arguments");
  cmd.nargv = (int)na;
  cmd.nenv = (int)ne;
  cmd.len = (int)len;
  strs = malloc(len);
  if (strs == NULL) caml_raise_out_of_memory();
  off = 0;
#define PUT_STRING(v)                          \
  do {                                         \
    size_t l = strlen(String_val(v)) + 1;      \
    memcpy(strs + off, String_val(v), l);      \
    off += l;                                  \
  } while (0)
  PUT_STRING(prog);
  PUT_STRING(cwd);
  for (i = 0; i < (int)na; i++) PUT_STRING(Field(argv, i));
  for (i = 0; i < (int)ne; i++) PUT_STRING(Field(envp, i));
#undef PUT_STRING
  memset(&mh, 0, sizeof mh);
  memset(&u, 0, sizeof u);
  iov.iov_base = &cmd;
  iov.iov_len = sizeof cmd;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (k > 0) {
    mh.msg_control = u.buf;
    mh.msg_controllen = CMSG_SPACE(k * sizeof(int));
    ch = CMSG_FIRSTHDR(&mh);
    ch->cmsg_level = SOL_SOCKET;
    ch->cmsg_type = SCM_RIGHTS;
    ch->cmsg_len = CMSG_LEN(k * sizeof(int));
    memcpy(CMSG_DATA(ch), send_fds, k * sizeof(int));
  }
  do n = sendmsg(s, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof cmd) {
    free(strs);
    uerror("sendmsg", Nothing);
  }
  for (off = 0; off < len;) {
    n = send(s, strs + off, len - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      free(strs);
      uerror("send", Nothing);
    }
    off += (size_t)n;
  }
  free(strs);
  CAMLreturn(Val_unit);
}

CAMLprim value consort_proc_spare_start(value *argv, int argn)
{
  (void)argn;
  return consort_proc_spare_start_native(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5],
                                         argv[6]);
}

/* The zygote: a child the server forks once, at its start, that makes the
   spares (clone with CLONE_PARENT: they are the server's children, which
   reaps them). A clone copies the page tables of the process that makes it,
   and until the clone execs, every page of that process it shares is copied
   on the first write: made by the server itself, each spare cost the server
   a copy of its page tables and faults on every page it wrote (its minor
   heap) while the spare waited; made by the zygote, which writes nothing,
   neither falls on the server. The zygote runs only this C code, with its
   socket at 3, its standard streams on /dev/null, no other descriptor, and
   dies with the server (death signal, end of file).

   Request: struct zygote_req, then the cgroup.procs files (each ending with
   a NUL). Answer: struct zygote_ans, with the spare's socket (SCM_RIGHTS) when
   errnum is 0. */

struct zygote_req {
  int deathsig;
  int newpid;
  int ncgroups;
  int len;
};

struct zygote_ans {
  int pid;
  int how;
  int errnum;
};

static void zygote_main(pid_t parent, int sock)
{
  int i, null;
  struct zygote_req req;
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(126);
  if (sock != 3) {
    if (dup3(sock, 3, O_CLOEXEC) < 0) _exit(126);
    sock = 3;
  }
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 4, ~0U, 0) != 0)
#endif
    for (i = 4; i < 65536; i++) close(i);
  null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) _exit(126);
  for (i = 0; i < 3; i++)
    if (dup2(null, i) < 0) _exit(126);
  close(null);
  {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (i = 1; i < NSIG; i++) signal(i, SIG_DFL);
  }
  for (;;) {
    struct zygote_ans ans;
    struct msghdr mh;
    struct iovec iov;
    union {
      char buf[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } u;
    struct cmsghdr *ch;
    char *strs, **cg, *q;
    int sv[2];
    pid_t pid = -1;
    if (read_full(sock, (char *)&req, sizeof req) != 0) _exit(0); /* the server is gone */
    if (req.ncgroups < 0 || req.ncgroups > 16 || req.len < 0 || req.len > 65536) _exit(126);
    strs = malloc((size_t)req.len + 1);
    cg = malloc(((size_t)req.ncgroups + 1) * sizeof(char *));
    if (strs == NULL || cg == NULL) _exit(126);
    if (req.len > 0 && read_full(sock, strs, (size_t)req.len) != 0) _exit(0);
    strs[req.len] = '\0';
    for (i = 0, q = strs; i < req.ncgroups; i++) {
      if (q >= strs + req.len) _exit(126);
      cg[i] = q;
      q += strlen(q) + 1;
    }
    cg[req.ncgroups] = NULL;
    memset(&ans, 0, sizeof ans);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      ans.errnum = errno;
    } else {
      if (req.newpid) {
        pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | CLONE_NEWPID | CLONE_NEWNS | SIGCHLD, NULL,
                             NULL, NULL, NULL);
        if (pid == 0) spare_child(1, parent, req.deathsig, sv[1], cg, req.ncgroups);
        if (pid > 0) ans.how = 1;
      }
      if (pid < 0) {
        pid = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0) spare_child(0, parent, req.deathsig, sv[1], cg, req.ncgroups);
      }
      close(sv[1]);
      if (pid < 0) {
        ans.errnum = errno;
        close(sv[0]);
      }
      ans.pid = pid;
    }
    free(strs);
    free(cg);
    memset(&mh, 0, sizeof mh);
    memset(&u, 0, sizeof u);
    iov.iov_base = &ans;
    iov.iov_len = sizeof ans;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (ans.errnum == 0) {
      mh.msg_control = u.buf;
      mh.msg_controllen = sizeof u.buf;
      ch = CMSG_FIRSTHDR(&mh);
      ch->cmsg_level = SOL_SOCKET;
      ch->cmsg_type = SCM_RIGHTS;
      ch->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(ch), &sv[0], sizeof(int));
    }
    {
      ssize_t n;
      do n = sendmsg(sock, &mh, MSG_NOSIGNAL);
      while (n < 0 && errno == EINTR);
      if (ans.errnum == 0) close(sv[0]);
      if (n != (ssize_t)sizeof ans) _exit(0);
    }
  }
}

/* The zygote never runs OCaml again: it gives back its copies of the
   server's OCaml heaps (the major heap's chunks and the minor heap) so that
   each spare it clones copies no page table entry for them and each spare's
   end has none to take down (with the heaps kept, about 7 MB of anonymous
   memory per spare, 0.2 ms of CPU at each start). Only whole pages inside
   each block are given back: the allocator's and the heap's headers stay. */
static void zygote_release(void *lo, void *hi)
{
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = ((uintptr_t)lo + page - 1) & ~(page - 1), b = (uintptr_t)hi & ~(page - 1);
  if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static void zygote_release_heaps(void)
{
#if OCAML_VERSION_MAJOR < 5
  char *c, *next, *ranges[2 * 1024];
  int n = 0, i;
  /* Every chunk's next before any page is given back (a chunk's header is
     just before it, and is not given back anyway). */
  for (c = caml_heap_start; c != NULL && n < 2 * 1024; c = next) {
    next = Chunk_next(c);
    ranges[n++] = c;
    ranges[n++] = c + Chunk_size(c);
  }
  for (i = 0; i < n; i += 2) zygote_release(ranges[i], ranges[i + 1]);
  zygote_release(caml_young_start, caml_young_end);
#endif
}

/* consort_proc_zygote_make (): (pid, socket). */
CAMLprim value consort_proc_zygote_make(value unit)
{
  CAMLparam1(unit);
  CAMLlocal1(res);
  int sv[2];
  pid_t parent = getpid(), pid;
  (void)unit;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) uerror("socketpair", Nothing);
  pid = fork();
  if (pid == 0) {
    close(sv[0]);
    zygote_release_heaps();
    zygote_main(parent, sv[1]);
    _exit(126);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    uerror("fork", Nothing);
  }
  res = caml_alloc_tuple(2);
  Store_field(res, 0, Val_int(pid));
  Store_field(res, 1, Val_int(sv[0]));
  CAMLreturn(res);
}

/* consort_proc_zygote_ask zsock opts cgroups: asks the zygote for a spare
   (opts and cgroups as consort_proc_spare_make); consort_proc_zygote_answer
   then reads its (pid, how, socket). Failure "zygote: gone" if it does not
   take the request or does not answer. */
CAMLprim value consort_proc_zygote_ask(value zsock, value opts, value cgroups)
{
  CAMLparam3(zsock, opts, cgroups);
  int s = Int_val(zsock), i;
  mlsize_t n = Wosize_val(cgroups);
  size_t len = 0, off = 0;
  char *buf;
  struct zygote_req req;
  ssize_t r;
  for (i = 0; i < (int)n; i++) len += strlen(String_val(Field(cgroups, i))) + 1;
  if (n > 16 || len > 65536) caml_invalid_argument("zygote: cgroups");
  req.deathsig = Int_val(Field(opts, 0));
  req.newpid = Int_val(Field(opts, 1)) == 1;
  req.ncgroups = (int)n;
  req.len = (int)len;
  buf = malloc(sizeof req + len);
  if (buf == NULL) caml_raise_out_of_memory();
  memcpy(buf, &req, sizeof req);
  off = sizeof req;
  for (i = 0; i < (int)n; i++) {
    size_t l = strlen(String_val(Field(cgroups, i))) + 1;
    memcpy(buf + off, String_val(Field(cgroups, i)), l);
    off += l;
  }
  for (len = 0; len < off;) {
    r = send(s, buf + len, off - len, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      free(buf);
      caml_failwith("zygote: gone");
    }
    len += (size_t)r;
  }
  free(buf);
  CAMLreturn(Val_unit);
}

CAMLprim value consort_proc_zygote_answer(value zsock)
{
  CAMLparam1(zsock);
  CAMLlocal1(res);
  int s = Int_val(zsock), fd = -1;
  struct zygote_ans ans;
  struct msghdr mh;
  struct iovec iov;
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct cmsghdr *ch;
  ssize_t r;
  memset(&mh, 0, sizeof mh);
  iov.iov_base = &ans;
  iov.iov_len = sizeof ans;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.b;
  mh.msg_controllen = sizeof u.b;
  do r = recvmsg(s, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  while (r < 0 && errno == EINTR);
  for (ch = CMSG_FIRSTHDR(&mh); r > 0 && ch != NULL; ch = CMSG_NXTHDR(&mh, ch))
    if (ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS &&
        ch->cmsg_len >= CMSG_LEN(sizeof(int)))
      memcpy(&fd, CMSG_DATA(ch), sizeof(int));
  if (r != (ssize_t)sizeof ans) {
    if (fd >= 0) close(fd);
    caml_failwith("zygote: gone");
  }
  if (ans.errnum != 0 || fd < 0) {
    if (fd >= 0) close(fd);
    unix_error(ans.errnum != 0 ? ans.errnum : EIO, "clone", Nothing);
  }
  res = caml_alloc_tuple(3);
  Store_field(res, 0, Val_int(ans.pid));
  Store_field(res, 1, Val_int(ans.how));
  Store_field(res, 2, Val_int(fd));
  CAMLreturn(res);
}

/* The system's number of an OCaml signal, and back. */
CAMLprim value consort_proc_signal_to_system(value s)
{
  return Val_int(caml_convert_signal_number(Int_val(s)));
}

CAMLprim value consort_proc_signal_of_system(value s)
{
  return Val_int(caml_rev_convert_signal_number(Int_val(s)));
}
