/* TAP devices for consort.net.unix: open /dev/net/tun as an Ethernet TAP
   without packet information (IFF_TAP | IFF_NO_PI), bring an interface
   up, and read or write one frame between a descriptor and a Bigarray.

   The descriptor is non-blocking, so read and write keep the runtime lock
   and never allocate: they return the byte count or a negative errno. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <net/if.h>
#include <linux/if_tun.h>

#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/bigarray.h>
#include <caml/unixsupport.h>

/* [tap_open name] is (fd, the interface's name); "" lets the kernel pick. */
CAMLprim value consort_tap_open(value vname)
{
  CAMLparam1(vname);
  CAMLlocal2(res, n);
  struct ifreq ifr;
  int fd, err;
  if (caml_string_length(vname) >= IFNAMSIZ) caml_invalid_argument("Tap.open_: name too long");
  fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) uerror("open /dev/net/tun", Nothing);
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  strncpy(ifr.ifr_name, String_val(vname), IFNAMSIZ - 1);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    err = errno;
    close(fd);
    unix_error(err, "ioctl TUNSETIFF", vname);
  }
  n = caml_copy_string(ifr.ifr_name);
  res = caml_alloc_tuple(2);
  Store_field(res, 0, Val_int(fd));
  Store_field(res, 1, n);
  CAMLreturn(res);
}

/* [set_up name mtu] sets the interface's MTU (if positive) and brings it up. */
CAMLprim value consort_tap_set_up(value vname, value vmtu)
{
  CAMLparam2(vname, vmtu);
  struct ifreq ifr;
  int s, err;
  s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) uerror("socket", Nothing);
  memset(&ifr, 0, sizeof ifr);
  strncpy(ifr.ifr_name, String_val(vname), IFNAMSIZ - 1);
  if (Int_val(vmtu) > 0) {
    ifr.ifr_mtu = Int_val(vmtu);
    if (ioctl(s, SIOCSIFMTU, &ifr) < 0) goto fail;
  }
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) goto fail;
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) goto fail;
  close(s);
  CAMLreturn(Val_unit);
fail:
  err = errno;
  close(s);
  unix_error(err, "ioctl", vname);
  CAMLreturn(Val_unit);
}

intnat consort_tap_read_untagged(value fd, value buf, intnat off, intnat len)
{
  ssize_t r = read(Int_val(fd), (char *)Caml_ba_data_val(buf) + off, (size_t)len);
  return r < 0 ? -(intnat)errno : (intnat)r;
}

value consort_tap_read(value fd, value buf, value off, value len)
{
  return Val_long(consort_tap_read_untagged(fd, buf, Long_val(off), Long_val(len)));
}

intnat consort_tap_write_untagged(value fd, value buf, intnat off, intnat len)
{
  ssize_t r = write(Int_val(fd), (char *)Caml_ba_data_val(buf) + off, (size_t)len);
  return r < 0 ? -(intnat)errno : (intnat)r;
}

value consort_tap_write(value fd, value buf, value off, value len)
{
  return Val_long(consort_tap_write_untagged(fd, buf, Long_val(off), Long_val(len)));
}

value consort_tap_eagain(value unit)
{
  (void)unit;
  return Val_int(EAGAIN);
}
