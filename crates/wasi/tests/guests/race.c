// Opens swap/secret over and over while the host swaps `swap` between a symlink to a
// directory inside the sandbox and one to a directory outside it: every read must come from
// inside. Prints how many opens read each.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include "common.h"

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 1000;
  int inside = 0, outside = 0, refused = 0;
  for (int i = 0; i < rounds; i++) {
    int fd = open("swap/secret", O_RDONLY);
    if (fd < 0) {
      refused++;
      continue;
    }
    char buf[16] = {0};
    read(fd, buf, sizeof buf - 1);
    close(fd);
    if (!strncmp(buf, "inside", 6)) inside++;
    else outside++;
  }
  printf("inside %d outside %d refused %d\n", inside, outside, refused);
  return 0;
}
