// Files and directories through WASI 0.2 (built as a component with the preview 1 adapter):
// writes, appends and reads a file, stats it, lists a directory sorted, makes and removes a
// directory, and shows the errors of a missing file, an escape and a read-only directory.
// Each line is what `wasmtime run --dir` printed for it (see the CLI test).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void say(const char *what, int r) {
  if (r < 0)
    printf("%s: %s\n", what, strerror(errno));
  else
    printf("%s: OK\n", what);
}

int main(void) {
  FILE *f = fopen("notes.txt", "w");
  if (!f) {
    perror("fopen");
    return 1;
  }
  fprintf(f, "first line\n");
  fclose(f);
  f = fopen("notes.txt", "a");
  fprintf(f, "second line\n");
  fclose(f);

  char buf[128] = {0};
  f = fopen("notes.txt", "r");
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  printf("read %zu: %s", n, buf);

  struct stat st;
  say("stat notes.txt", stat("notes.txt", &st));
  printf("size %lld, regular %d\n", (long long)st.st_size, S_ISREG(st.st_mode));

  int fd = open("notes.txt", O_RDONLY);
  char part[7] = {0};
  printf("pread: %zd %s\n", pread(fd, part, 6, 6), part);
  close(fd);

  say("mkdir sub", mkdir("sub", 0755));
  say("mkdir sub again", mkdir("sub", 0755));
  f = fopen("sub/inner.txt", "w");
  fputs("inside\n", f);
  fclose(f);
  say("stat sub", stat("sub", &st));
  printf("directory %d\n", S_ISDIR(st.st_mode));

  DIR *d = opendir(".");
  char *names[64];
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) && count < 64) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
      names[count++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, count, sizeof *names, cmp);
  for (int i = 0; i < count; i++)
    printf("entry %s\n", names[i]);

  say("rmdir sub (not empty)", rmdir("sub"));
  say("unlink sub/inner.txt", unlink("sub/inner.txt"));
  say("rmdir sub", rmdir("sub"));
  say("open missing", open("missing.txt", O_RDONLY));
  say("open ../escape", open("../escape", O_RDONLY));
  say("open /etc/passwd", open("/etc/passwd", O_RDONLY));
  say("unlink notes.txt", unlink("notes.txt"));
  say("stat notes.txt", stat("notes.txt", &st));
  return 0;
}
