/* Process-wide malloc settings for programs that move bulk data through
   the RPC (see Rpc_udp.keep_memory). glibc only; elsewhere nothing. */

#include <caml/mlvalues.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

value consort_cap_keep_memory(value mmap_threshold, value trim_threshold)
{
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, Int_val(mmap_threshold));
  mallopt(M_TRIM_THRESHOLD, Int_val(trim_threshold));
  return Val_true;
#else
  (void)mmap_threshold;
  (void)trim_threshold;
  return Val_false;
#endif
}
