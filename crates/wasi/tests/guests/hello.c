// The smallest useful WASI command: one line to standard output (the fresh-path benchmark's
// second program beside Sightglass's noop).
#include <stdio.h>

int main(void) {
  printf("Hello, world!\n");
  return 0;
}
