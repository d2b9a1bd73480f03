// File and directory operations beneath the preopen ".", escape attempts, and the read-only
// preopen "ro". The host test lays out: ./out -> ../outside (a directory with `secret`),
// ./abs -> the absolute path of outside, ./sub (a directory), ro/r.txt ("read only\n").
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

// Opens `path` beneath descriptor 3 (".") with raw path_open: the host's errno, unchanged.
static int open_raw(const char *path, int lookup, int oflags, int64_t rights) {
  int32_t fd;
  return raw_path_open(3, lookup, (int32_t)path, strlen(path), oflags, rights, rights, 0,
                       (int32_t)&fd);
}

int main(void) {
  char buf[64] = {0};
  struct stat st;

  CHECK("mkdir d", mkdir("d", 0755));
  CHECK("mkdir d again", mkdir("d", 0755));
  int fd;
  CHECK("create d/f", fd = open("d/f", O_CREAT | O_WRONLY | O_TRUNC, 0644));
  CHECK("write", write(fd, "hello world", 11));
  CHECK("close", close(fd));
  CHECK("close again", close(fd));

  CHECK("open d/f", fd = open("d/f", O_RDWR));
  CHECK("read 5", read(fd, buf, 5));
  printf("read: %s\n", buf);
  printf("seek to 6: %ld\n", (long)lseek(fd, 6, SEEK_SET));
  memset(buf, 0, sizeof buf);
  CHECK("read rest", read(fd, buf, sizeof buf));
  printf("read: %s\n", buf);
  printf("tell: %ld\n", (long)lseek(fd, 0, SEEK_CUR));
  memset(buf, 0, sizeof buf);
  CHECK("pread 4 at 2", pread(fd, buf, 4, 2));
  printf("pread: [%s]\n", buf);
  CHECK("pwrite J at 0", pwrite(fd, "J", 1, 0));
  CHECK("fstat", fstat(fd, &st));
  printf("size %lld regular %d\n", (long long)st.st_size, S_ISREG(st.st_mode));
  CHECK("ftruncate 5", ftruncate(fd, 5));
  CHECK("fstat", fstat(fd, &st));
  printf("size %lld\n", (long long)st.st_size);
  printf("posix_fallocate 100: %s\n", errno_name(posix_fallocate(fd, 0, 100)));
  CHECK("fstat", fstat(fd, &st));
  printf("size %lld\n", (long long)st.st_size);
  CHECK("fsync", fsync(fd));
  CHECK("fdatasync", fdatasync(fd));
  CHECK("set append", fcntl(fd, F_SETFL, O_APPEND));
  printf("append: %d\n", (fcntl(fd, F_GETFL) & O_APPEND) != 0);
  CHECK("set stdout non-blocking", fcntl(1, F_SETFL, O_NONBLOCK));
  CHECK("close", close(fd));

  CHECK("rename d/f d/g", rename("d/f", "d/g"));
  CHECK("open d/f", open("d/f", O_RDONLY));
  CHECK("link d/g d/h", link("d/g", "d/h"));
  CHECK("stat d/h", stat("d/h", &st));
  printf("nlink %d\n", (int)st.st_nlink);
  CHECK("symlink g d/s", symlink("g", "d/s"));
  ssize_t n;
  CHECK("readlink d/s", n = readlink("d/s", buf, sizeof buf));
  buf[n > 0 ? n : 0] = 0;
  printf("readlink: %s\n", buf);
  CHECK("lstat d/s", lstat("d/s", &st));
  printf("is link %d\n", S_ISLNK(st.st_mode));
  CHECK("stat d/s", stat("d/s", &st));
  printf("follows to size %lld\n", (long long)st.st_size);
  struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  CHECK("utimensat d/g", utimensat(AT_FDCWD, "d/g", times, 0));
  CHECK("stat d/g", stat("d/g", &st));
  printf("mtime %lld\n", (long long)st.st_mtim.tv_sec);

  DIR *dir = opendir("d");
  char *names[16];
  int count = 0;
  struct dirent *e;
  while (dir && (e = readdir(dir)) && count < 16) names[count++] = strdup(e->d_name);
  if (dir) closedir(dir);
  qsort(names, count, sizeof *names, cmp);
  printf("listing:");
  for (int i = 0; i < count; i++) printf(" %s", names[i]);
  printf("\n");

  CHECK("rmdir d (not empty)", rmdir("d"));
  CHECK("unlink d", unlink("d"));
  CHECK("unlink d/s", unlink("d/s"));
  CHECK("unlink d/h", unlink("d/h"));
  CHECK("unlink d/g", unlink("d/g"));
  CHECK("rmdir d", rmdir("d"));
  CHECK("rmdir d again", rmdir("d"));

  // The rest of the descriptor functions, on a file of its own.
  int m, other;
  CHECK("create m", m = open("m", O_CREAT | O_EXCL | O_RDWR, 0644));
  CHECK("create m exclusively again", open("m", O_CREAT | O_EXCL | O_RDWR, 0644));
  CHECK("fadvise", -posix_fadvise(m, 0, 0, POSIX_FADV_SEQUENTIAL));
  printf("fadvise bad advice: %s\n", errno_name(posix_fadvise(m, 0, 0, 99)));
  struct timespec ftimes[2] = {{2000000000, 0}, {2000000000, 0}};
  CHECK("futimens", futimens(m, ftimes));
  CHECK("fstat", fstat(m, &st));
  printf("mtime %lld\n", (long long)st.st_mtim.tv_sec);
  CHECK("open other", other = open("ro/r.txt", O_RDONLY));
  RAW("renumber m over other", __wasi_fd_renumber(m, other));
  RAW("renumber from closed m", __wasi_fd_renumber(m, other));
  CHECK("write through the new number", write(other, "moved", 5));
  CHECK("fstat new number", fstat(other, &st));
  printf("size %lld\n", (long long)st.st_size);
  __wasi_fdstat_t fdstat;
  RAW("fdstat", __wasi_fd_fdstat_get(other, &fdstat));
  RAW("drop the write right",
      __wasi_fd_fdstat_set_rights(other, fdstat.fs_rights_base & ~__WASI_RIGHTS_FD_WRITE, 0));
  RAW("take it back",
      __wasi_fd_fdstat_set_rights(other, fdstat.fs_rights_base, 0));
  CHECK("write without the right", write(other, "x", 1));
  char name[1];
  RAW("preopen name into 1 byte", __wasi_fd_prestat_dir_name(4, (uint8_t *)name, 1));
  RAW("sched_yield", __wasi_sched_yield());
  CHECK("close", close(other));
  CHECK("unlink m", unlink("m"));

  // Escapes, through the host's own errno.
  const int64_t READ = __WASI_RIGHTS_FD_READ;
  RAW("open ../outside/secret", open_raw("../outside/secret", 0, 0, READ));
  RAW("open sub/../../outside/secret", open_raw("sub/../../outside/secret", 0, 0, READ));
  RAW("open /etc/passwd", open_raw("/etc/passwd", 0, 0, READ));
  RAW("open out/secret", open_raw("out/secret", 1, 0, READ));
  RAW("open abs/secret", open_raw("abs/secret", 1, 0, READ));
  RAW("open out, following", open_raw("out", 1, __WASI_OFLAGS_DIRECTORY, READ));
  RAW("open out, not following", open_raw("out", 0, __WASI_OFLAGS_DIRECTORY, READ));
  RAW("stat out/secret", __wasi_path_filestat_get(3, 1, "out/secret", (__wasi_filestat_t *)64));
  RAW("stat out, following", __wasi_path_filestat_get(3, 1, "out", (__wasi_filestat_t *)64));
  RAW("stat out, not following", __wasi_path_filestat_get(3, 0, "out", (__wasi_filestat_t *)64));
  RAW("mkdir out/new", __wasi_path_create_directory(3, "out/new"));
  RAW("unlink out/secret", __wasi_path_unlink_file(3, "out/secret"));
  RAW("rename into out", __wasi_path_rename(3, "sub", 3, "out/moved"));
  RAW("link to out/secret", __wasi_path_link(3, 0, "out/secret", 3, "stolen"));
  RAW("set times through abs, following",
      __wasi_path_filestat_set_times(3, 1, "abs", 0, 0, __WASI_FSTFLAGS_MTIM_NOW));
  RAW("symlink to outside", __wasi_path_symlink("../outside/secret", 3, "mine"));
  RAW("open mine", open_raw("mine", 1, 0, READ));
  RAW("unlink mine", __wasi_path_unlink_file(3, "mine"));

  // The read-only preopen "ro" (descriptor 4).
  int ro;
  CHECK("ro: open for reading", ro = open("ro/r.txt", O_RDONLY));
  memset(buf, 0, sizeof buf);
  CHECK("ro: read", read(ro, buf, sizeof buf));
  printf("ro: read: %s", buf);
  CHECK("ro: write", write(ro, "x", 1));
  int32_t rofd;
  RAW("ro: open for writing",
      raw_path_open(4, 0, (int32_t) "r.txt", 5, 0, __WASI_RIGHTS_FD_WRITE, 0, 0, (int32_t)&rofd));
  // wasi-libc asks only for the rights the directory passes on, so its open succeeds
  // read-only, and writing through it fails.
  int w;
  CHECK("ro: libc open for writing", w = open("ro/r.txt", O_WRONLY));
  CHECK("ro: write through it", write(w, "x", 1));
  CHECK("ro: create", open("ro/new", O_CREAT | O_WRONLY, 0644));
  CHECK("ro: mkdir", mkdir("ro/dir", 0755));
  CHECK("ro: unlink", unlink("ro/r.txt"));
  CHECK("ro: set times", utimensat(AT_FDCWD, "ro/r.txt", times, 0));
  return 0;
}
