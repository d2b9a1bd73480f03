// Lists a directory: how many entries (with . and ..) and their names' bytes. With thousands of
// entries wasi-libc reads them over several fd_readdir calls, resuming by cookie.
#include <dirent.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  DIR *d = opendir(argc > 1 ? argv[1] : ".");
  if (!d) {
    perror("opendir");
    return 1;
  }
  long n = 0, bytes = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    n++;
    bytes += strlen(e->d_name);
  }
  closedir(d);
  printf("%ld entries, %ld name bytes\n", n, bytes);
  return 0;
}
