// Arguments, environment, clocks, randomness, stdio and exit codes.
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "common.h"

extern char **environ;

static int64_t ns(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "args")) {
    for (int i = 0; i < argc; i++) printf("arg %d: %s\n", i, argv[i]);
    for (char **e = environ; *e; e++) printf("env: %s\n", *e);
    return 0;
  }
  if (!strcmp(mode, "exit")) exit(atoi(argv[2]));
  if (!strcmp(mode, "clocks")) {
    int64_t t0 = ns(CLOCK_MONOTONIC);
    struct timespec nap = {0, 20 * 1000000};
    CHECK("nanosleep", nanosleep(&nap, NULL));
    printf("slept at least 20ms: %d\n", ns(CLOCK_MONOTONIC) - t0 >= 20 * 1000000);
    // Until an absolute time (poll_oneoff's abstime clock subscription).
    int64_t until = ns(CLOCK_MONOTONIC) + 20 * 1000000;
    struct timespec at = {until / 1000000000, until % 1000000000};
    printf("clock_nanosleep until: %d\n", clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL));
    printf("woke after it: %d\n", ns(CLOCK_MONOTONIC) >= until);
    printf("realtime after 2020: %d\n", ns(CLOCK_REALTIME) > (int64_t)1577836800 * 1000000000);
    printf("process cpu time: %d\n", ns(CLOCK_PROCESS_CPUTIME_ID) > 0);
    struct timespec res;
    CHECK("clock_getres", clock_getres(CLOCK_MONOTONIC, &res));
    RAW("bad clock", __wasi_clock_time_get(99, 0, (__wasi_timestamp_t *)16));
    return 0;
  }
  if (!strcmp(mode, "random")) {
    unsigned char a[256], b[256];
    CHECK("getentropy", getentropy(a, sizeof a));
    CHECK("getentropy", getentropy(b, sizeof b));
    printf("differ: %d\n", memcmp(a, b, sizeof a) != 0);
    return 0;
  }
  if (!strcmp(mode, "cat")) {
    // Standard input to standard output, upper-cased; the byte count to standard error.
    struct pollfd p = {0, POLLIN, 0};
    CHECK("poll stdin", poll(&p, 1, 1000));
    char buf[4096];
    long total = 0;
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; i++)
        if (buf[i] >= 'a' && buf[i] <= 'z') buf[i] -= 32;
      for (ssize_t off = 0; off < n;) {
        ssize_t w = write(1, buf + off, n - off);
        if (w < 0) {
          fprintf(stderr, "write: %s\n", errno_name(errno));
          return 1;
        }
        off += w;
      }
      total += n;
    }
    fprintf(stderr, "%ld bytes\n", total);
    return 0;
  }
  if (!strcmp(mode, "faults")) {
    // Pointers outside memory: the host says EFAULT and goes on.
    uint32_t far = 0xfffffff0u;
    __wasi_size_t n;
    RAW("fd_write, iovecs outside", __wasi_fd_write(1, (const __wasi_ciovec_t *)far, 1, &n));
    __wasi_ciovec_t iov = {(const uint8_t *)far, 64};
    RAW("fd_write, buffer outside", __wasi_fd_write(1, &iov, 1, &n));
    RAW("fd_write, result outside", __wasi_fd_write(1, &iov, 0, (__wasi_size_t *)far));
    RAW("args_get outside", __wasi_args_get((uint8_t **)far, (uint8_t *)far));
    RAW("random_get outside", __wasi_random_get((uint8_t *)far, 64));
    RAW("path_open, path outside", raw_path_open(3, 0, (int32_t)far, 64, 0, 0, 0, 0, 16));
    RAW("path_open, result outside", raw_path_open(3, 0, (int32_t)".", 1, 0, 0, 0, 0, (int32_t)far));
    RAW("fd_write bad fd", __wasi_fd_write(99, &iov, 0, &n));
    RAW("fd_close bad fd", __wasi_fd_close(99));
    RAW("fd_seek on stdout", __wasi_fd_seek(1, 0, __WASI_WHENCE_SET, (__wasi_filesize_t *)16));
    RAW("proc_raise", raw_proc_raise(15));
    RAW("sock_shutdown", __wasi_sock_shutdown(3, __WASI_SDFLAGS_RD));
    return 0;
  }
  printf("unknown mode %s\n", mode);
  return 2;
}
