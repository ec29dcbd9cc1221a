/* Group commit on a real disk: the fsync of the replica's log runs in a
   thread of C, outside the OCaml runtime (it never takes the runtime lock),
   while the replica's event loop goes on; the thread writes the outcome to
   a pipe the loop watches. */

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
  struct consort_kv_job *next;
};

/* One worker thread (started at the first fsync) takes the jobs in turn:
   no thread is created per fsync. */
static pthread_mutex_t consort_kv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t consort_kv_cond = PTHREAD_COND_INITIALIZER;
static struct consort_kv_job *consort_kv_head = NULL, *consort_kv_tail = NULL;
static int consort_kv_started = 0;

static void *consort_kv_worker(void *unused)
{
  (void)unused;
  for (;;) {
    struct consort_kv_job *j;
    int32_t msg[2];
    ssize_t w;
    pthread_mutex_lock(&consort_kv_lock);
    while (consort_kv_head == NULL) pthread_cond_wait(&consort_kv_cond, &consort_kv_lock);
    j = consort_kv_head;
    consort_kv_head = j->next;
    if (consort_kv_head == NULL) consort_kv_tail = NULL;
    pthread_mutex_unlock(&consort_kv_lock);
    msg[0] = j->id;
    msg[1] = fsync(j->fd) == 0 ? 0 : errno;
    /* 8 bytes: one atomic write to the pipe. */
    do
      w = write(j->notify, msg, sizeof msg);
    while (w < 0 && errno == EINTR);
    free(j);
  }
  return NULL;
}

/* [consort_kv_fsync_async fd notify id]: fsync(fd) in the worker thread
   (every signal blocked in it), which then writes [id] and the outcome (0
   or errno), two native 32-bit integers, to [notify]. */
CAMLprim value consort_kv_fsync_async(value fd, value notify, value id)
{
  struct consort_kv_job *j = malloc(sizeof *j);
  if (j == NULL) caml_raise_out_of_memory();
  j->fd = Int_val(fd);
  j->notify = Int_val(notify);
  j->id = (int32_t)Int_val(id);
  j->next = NULL;
  pthread_mutex_lock(&consort_kv_lock);
  if (!consort_kv_started) {
    pthread_t th;
    pthread_attr_t a;
    sigset_t all, old;
    int e;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    e = pthread_create(&th, &a, consort_kv_worker, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
      pthread_mutex_unlock(&consort_kv_lock);
      free(j);
      unix_error(e, "pthread_create", Nothing);
    }
    consort_kv_started = 1;
  }
  if (consort_kv_tail == NULL)
    consort_kv_head = j;
  else
    consort_kv_tail->next = j;
  consort_kv_tail = j;
  pthread_cond_signal(&consort_kv_cond);
  pthread_mutex_unlock(&consort_kv_lock);
  return Val_unit;
}

/* [consort_kv_error_of_errno e]: the Unix.error of errno [e]. */
CAMLprim value consort_kv_error_of_errno(value e)
{
  return unix_error_of_code(Int_val(e));
}
