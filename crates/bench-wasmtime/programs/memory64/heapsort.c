// A memory-heavy kernel for wasm32 and wasm64 alike (freestanding: no libc), for
// `wasi-vs-wasmtime`: a heap sort of 2^21 pseudo-random 32-bit keys, a histogram of their top
// bytes and a prefix sum over 8 MiB, four rounds, bracketed by `bench.start` and `bench.end`.
// Pointers and sizes are what the target makes them: 32 or 64 bits.
typedef unsigned int u32;
typedef unsigned long long u64;
typedef __SIZE_TYPE__ usize;

__attribute__((import_module("bench"), import_name("start"))) void bench_start(void);
__attribute__((import_module("bench"), import_name("end"))) void bench_end(void);

#define N (1u << 21)
static u32 keys[N];
static u32 sums[N];
static u32 histogram[256];
u32 result;

static void sift(u32 *a, usize start, usize end) {
  usize root = start;
  while (2 * root + 1 < end) {
    usize child = 2 * root + 1;
    if (child + 1 < end && a[child] < a[child + 1])
      child++;
    if (a[root] >= a[child])
      return;
    u32 t = a[root];
    a[root] = a[child];
    a[child] = t;
    root = child;
  }
}

static void heap_sort(u32 *a, usize n) {
  for (usize i = n / 2; i-- > 0;)
    sift(a, i, n);
  for (usize end = n; end-- > 1;) {
    u32 t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift(a, 0, end);
  }
}

void _start(void) {
  bench_start();
  u32 check = 0;
  u64 state = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < 4; round++) {
    for (usize i = 0; i < N; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      keys[i] = (u32)(state >> 32);
    }
    heap_sort(keys, N);
    for (usize i = 0; i < 256; i++)
      histogram[i] = 0;
    u32 sum = 0;
    for (usize i = 0; i < N; i++) {
      histogram[keys[i] >> 24]++;
      sum += keys[i];
      sums[i] = sum;
    }
    check ^= sums[N - 1] ^ histogram[17] ^ keys[N / 2];
  }
  bench_end();
  result = check;
}
