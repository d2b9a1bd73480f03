// Shared by the WASI test guests: print a call's outcome as `label: OK` or its errno's name.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <wasi/api.h>

static inline const char *errno_name(int e) {
  switch (e) {
    case 0: return "OK";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EBADF: return "EBADF";
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case EISDIR: return "EISDIR";
    case ENOTDIR: return "ENOTDIR";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ENOTCAPABLE: return "ENOTCAPABLE";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ELOOP: return "ELOOP";
    case ENOSPC: return "ENOSPC";
    case ENOTSUP: return "ENOTSUP";
    case ESPIPE: return "ESPIPE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    default: return "other";
  }
}

// A libc call (evaluated here, after errno is cleared): 0 or more is success, -1 sets errno.
#define CHECK(label, call)                                                       \
  do {                                                                           \
    errno = 0;                                                                   \
    long r_ = (long)(call);                                                      \
    printf("%s: %s\n", label,                                                    \
           r_ >= 0 ? "OK" : errno ? errno_name(errno) : "failed without errno"); \
  } while (0)

// Imports that wasi-libc does not declare (or declares with a computed length).
#define WASI_IMPORT(name) \
  __attribute__((import_module("wasi_snapshot_preview1"), import_name(#name)))
int32_t raw_proc_raise(int32_t signal) WASI_IMPORT(proc_raise);
int32_t raw_path_open(int32_t fd, int32_t dirflags, int32_t path, int32_t len, int32_t oflags,
                      int64_t base, int64_t inheriting, int32_t fdflags, int32_t out)
    WASI_IMPORT(path_open);

// A raw WASI call returns its errno.
#define RAW(label, call) printf("%s: %s\n", label, errno_name((int)(call)))
