/* Exit probes in C for quick_exit_test.sh, written to files so that the test sees how a worker ended:
 *   c_atexit_marker_arm(PATH): a C library's atexit handler (as a library that flushes its files at exit has
 *     one) creates PATH when the process exits through exit();
 *   c_teardown_marker_set(PATH), then Py_AtExit(c_teardown_marker_write): creates PATH at the very end of
 *     Python's own teardown (Py_AtExit runs its functions there, after the modules were freed). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char atexit_path[4096];
static char teardown_path[4096];

static void create(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    (void)write(fd, text, strlen(text));
    close(fd);
  }
}

static void write_atexit_marker(void) { create(atexit_path, "c atexit ran"); }

int c_atexit_marker_arm(const char* path) {
  if (strlen(path) >= sizeof atexit_path) return -1;
  strcpy(atexit_path, path);
  return atexit(write_atexit_marker);
}

int c_teardown_marker_set(const char* path) {
  if (strlen(path) >= sizeof teardown_path) return -1;
  strcpy(teardown_path, path);
  return 0;
}

void c_teardown_marker_write(void) { create(teardown_path, "torn down"); }
