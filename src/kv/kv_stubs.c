/* Group commit on a real disk: the fsync of the replica's log runs in a
   thread of its own, outside the OCaml runtime (it never takes the runtime
   lock), while the replica's event loop goes on; the thread writes the
   outcome to a pipe the loop watches. */

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/memory.h>
#include <caml/mlvalues.h>
#include <caml/unixsupport.h>

struct consort_kv_job {
  int fd, notify;
  int32_t id;
};

static void *consort_kv_fsync_thread(void *p)
{
  struct consort_kv_job *j = p;
  int32_t msg[2];
  ssize_t w;
  msg[0] = j->id;
  msg[1] = fsync(j->fd) == 0 ? 0 : errno;
  /* 8 bytes: one atomic write to the pipe. */
  do
    w = write(j->notify, msg, sizeof msg);
  while (w < 0 && errno == EINTR);
  free(j);
  return NULL;
}

/* [consort_kv_fsync_async fd notify id]: fsync(fd) in a detached thread
   (every signal blocked in it), which then writes [id] and the outcome (0
   or errno), two native 32-bit integers, to [notify]. */
CAMLprim value consort_kv_fsync_async(value fd, value notify, value id)
{
  pthread_t th;
  pthread_attr_t a;
  sigset_t all, old;
  int e;
  struct consort_kv_job *j = malloc(sizeof *j);
  if (j == NULL) caml_raise_out_of_memory();
  j->fd = Int_val(fd);
  j->notify = Int_val(notify);
  j->id = (int32_t)Int_val(id);
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  e = pthread_create(&th, &a, consort_kv_fsync_thread, j);
  pthread_attr_destroy(&a);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e != 0) {
    free(j);
    unix_error(e, "pthread_create", Nothing);
  }
  return Val_unit;
}

/* [consort_kv_error_of_errno e]: the Unix.error of errno [e]. */
CAMLprim value consort_kv_error_of_errno(value e)
{
  return unix_error_of_code(Int_val(e));
}
