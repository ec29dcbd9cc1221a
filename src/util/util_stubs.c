/* Reads and writes of large buffers in one system call, without the copy
   through a 64 KiB stack buffer that Unix.read and Unix.write make.

   The runtime lock is kept: the buffer is an OCaml string or bytes, which
   must not move while the kernel copies into or out of it, and nothing here
   allocates between taking the pointer and the call. The callers are
   single-threaded (the file server's and the client's event loops), and
   the files read are regular files. */

#define _GNU_SOURCE
#include <errno.h>
#include <unistd.h>
#include <sys/types.h>

#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/unixsupport.h>

/* pread(fd, buf + pos, len, off) until [len] bytes or the end of the file;
   the number of bytes read. */
value consort_util_pread(value fd, value buf, value pos, value len, value off)
{
  char *p = (char *)Bytes_val(buf) + Long_val(pos);
  size_t want = Long_val(len);
  off_t at = Long_val(off);
  size_t got = 0;
  while (got < want) {
    ssize_t n = pread(Int_val(fd), p + got, want - got, at + (off_t)got);
    if (n < 0) {
      if (errno == EINTR) continue;
      uerror("pread", Nothing);
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  return Val_long(got);
}

/* One write(fd, s + off, len); the number of bytes written. */
value consort_util_write(value fd, value s, value off, value len)
{
  for (;;) {
    ssize_t n = write(Int_val(fd), String_val(s) + Long_val(off), Long_val(len));
    if (n >= 0) return Val_long(n);
    if (errno != EINTR) uerror("write", Nothing);
  }
}
