/* Linked into the portable programs only (MESHRUN_PORTABLE, cmake/Portable.cmake), with -Wl,--wrap=arc4random.
 *
 * Debian 12's static libstdc++ (GCC 12, built on glibc 2.36) draws std::random_device's bytes from
 * arc4random, which glibc added in 2.36: linked as it is, the programs would need glibc 2.36 and could not
 * run on Ubuntu 22.04 (2.35) or RHEL 9 (2.34). The wrapper below gives libstdc++ the same cryptographic
 * bytes from getrandom(2) (glibc 2.25), so the programs need glibc 2.34 at most (auditwheel's tag, checked
 * by tests/packaging). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

/* Reads the whole of buf from /dev/urandom: the fallback for kernels without getrandom (before 3.17). */
static int read_urandom(unsigned char* buf, size_t size) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < size) {
    ssize_t n = read(fd, buf + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += (size_t)n;
  }
  close(fd);
  return done == size ? 0 : -1;
}

/* Same contract as arc4random: 32 random bits, never fails (aborts when the system has no randomness). */
uint32_t __wrap_arc4random(void);
uint32_t __wrap_arc4random(void) {
  uint32_t value = 0;
  unsigned char* buf = (unsigned char*)&value;
  size_t done = 0;
  while (done < sizeof value) {
    ssize_t n = getrandom(buf + done, sizeof value - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (read_urandom(buf + done, sizeof value - done) != 0) abort();
      break;
    }
    done += (size_t)n;
  }
  return value;
}
