// A filter: counts the lines and bytes of standard input (the fresh-path benchmark's third
// program: it reads stdin and writes stdout, as a request handler would).
#include <stdio.h>
#include <unistd.h>

int main(void) {
  char buf[4096];
  long lines = 0, bytes = 0;
  ssize_t n;
  while ((n = read(0, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
    bytes += n;
  }
  printf("%ld %ld\n", lines, bytes);
  return 0;
}
