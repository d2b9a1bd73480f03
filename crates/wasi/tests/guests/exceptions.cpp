// C++ exceptions compiled to WebAssembly's exception handling (try_table, throw, throw_ref):
// throws caught one frame and many frames up, destructors run while unwinding, rethrows,
// exceptions carrying strings, and one that no handler catches (std::terminate traps).
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

struct ParseError : std::runtime_error {
  int at;
  ParseError(const std::string &what, int at) : std::runtime_error(what), at(at) {}
};

static int live = 0;
struct Guard {
  const char *name;
  explicit Guard(const char *name) : name(name) { live++; }
  ~Guard() {
    live--;
    printf("  unwound %s\n", name);
  }
};

static int digit(char c, int at) {
  if (c < '0' || c > '9') throw ParseError(std::string("not a digit: ") + c, at);
  return c - '0';
}

static long sum(const char *s) {
  Guard g("sum");
  long total = 0;
  for (int i = 0; s[i]; i++) total += digit(s[i], i);
  return total;
}

static int depth(int n) {
  Guard g(n % 4 == 0 ? "depth/4" : "depth");
  if (n == 0) throw n + 1000;
  return depth(n - 1) + 1;
}

static void rethrows() {
  try {
    sum("1a");
  } catch (const ParseError &e) {
    printf("  first handler: %s\n", e.what());
    throw;
  }
}

int main(int argc, char **argv) {
  const char *inputs[] = {"12345", "98x7", "", "000042", "!"};
  int caught = 0;
  for (const char *in : inputs) {
    try {
      printf("sum(\"%s\") = %ld\n", in, sum(in));
    } catch (const ParseError &e) {
      caught++;
      printf("error at %d: %s\n", e.at, e.what());
    }
  }
  try {
    depth(9);
  } catch (int n) {
    printf("caught %d ten frames up\n", n);
  }
  try {
    rethrows();
  } catch (const std::exception &e) {
    printf("second handler: %s\n", e.what());
  }
  try {
    throw std::string("a string");
  } catch (...) {
    printf("caught something\n");
  }
  printf("caught %d parse errors, %d guards live\n", caught, live);
  if (argc > 1 && strcmp(argv[1], "uncaught") == 0) {
    fflush(stdout);
    sum("no");
  }
  return 0;
}
