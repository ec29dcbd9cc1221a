/* Bytes from the kernel's generator (getrandom(2)), for the keys of
   Tcp_secret: the one place the stack needs entropy, so it needs no
   random-number library of its own. Blocks only until the kernel's pool is
   first initialised, as getrandom without flags does. */

#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <caml/mlvalues.h>
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/fail.h>

#define MAX_RANDOM 256

value consort_net_getrandom(value vlen)
{
  CAMLparam1(vlen);
  CAMLlocal1(s);
  unsigned char buf[MAX_RANDOM];
  long len = Long_val(vlen);
  size_t got = 0;
  if (len < 0 || len > MAX_RANDOM)
    caml_invalid_argument("Tcp_secret: getrandom of more than 256 bytes");
  while (got < (size_t)len) {
    ssize_t n = getrandom(buf + got, (size_t)len - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      caml_failwith("Tcp_secret: getrandom failed");
    }
    got += (size_t)n;
  }
  s = caml_alloc_initialized_string((mlsize_t)len, (const char *)buf);
  explicit_bzero(buf, sizeof buf);
  CAMLreturn(s);
}
