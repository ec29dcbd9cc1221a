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

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/signals.h>
#include <caml/unixsupport.h>

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

static void confined_child(int newpid, pid_t parent, const char *prog, char **cargv,
                           char **cenvp, int *fd, long *o, char **cstrs, int nstrs)
{
  struct rlimit rl;
  sigset_t none;
  int i, errfd = fd[6], statusfd = fd[5];
  long cpu = o[0], as = o[1];
  int deathsig = (int)o[2];
  long uid = o[3], gid = o[4], nproc = o[5], nofile = o[6];
  setpgid(0, 0);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (i = 1; i < NSIG; i++) signal(i, SIG_DFL);
  /* Into the program's cgroups first: everything it starts is counted. */
  for (i = 1; i < nstrs; i++) {
    int c = open(cstrs[i], O_WRONLY | O_CLOEXEC);
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
  if (cstrs[0][0] != '\0' && chdir(cstrs[0]) != 0) fail_stage(errfd, "chdir");
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
    pid_t child = fork();
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

/* The system's number of an OCaml signal, and back. */
CAMLprim value consort_proc_signal_to_system(value s)
{
  return Val_int(caml_convert_signal_number(Int_val(s)));
}

CAMLprim value consort_proc_signal_of_system(value s)
{
  return Val_int(caml_rev_convert_signal_number(Int_val(s)));
}
