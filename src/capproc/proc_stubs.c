/* Starting a program as a child with resource limits, and signal numbers. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>
#include <fcntl.h>

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

/* The system's number of an OCaml signal, and back. */
CAMLprim value consort_proc_signal_to_system(value s)
{
  return Val_int(caml_convert_signal_number(Int_val(s)));
}

CAMLprim value consort_proc_signal_of_system(value s)
{
  return Val_int(caml_rev_convert_signal_number(Int_val(s)));
}
