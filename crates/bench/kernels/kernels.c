// Freestanding compute kernels for the metering benchmark (no libc, no WASI): each export
// takes a size, works on static memory, and returns a checksum so nothing is optimised away.
// Rebuild with build.sh (Debian's clang and lld).

typedef unsigned int u32;
typedef unsigned long long u64;

// The compiler turns clearing loops into memset calls; freestanding, we provide it.
void *memset(void *dst, int c, unsigned long n) {
    unsigned char *d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

static u32 seed;
static u32 next(void) {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}

static int ints[1 << 16];

static void quicksort(int *a, int lo, int hi) {
    while (lo < hi) {
        int p = a[(lo + hi) / 2], i = lo, j = hi;
        while (i <= j) {
            while (a[i] < p) i++;
            while (a[j] > p) j--;
            if (i <= j) {
                int t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (j - lo < hi - i) {
            quicksort(a, lo, j);
            lo = i;
        } else {
            quicksort(a, i, hi);
            hi = j;
        }
    }
}

__attribute__((export_name("sort"))) int sort(int n) {
    if (n > (1 << 16)) n = 1 << 16;
    seed = 42;
    for (int i = 0; i < n; i++) ints[i] = (int)next();
    quicksort(ints, 0, n - 1);
    int sum = 0;
    for (int i = 0; i < n; i += 97) sum ^= ints[i] + i;
    return sum;
}

static u32 crc_table[256];

__attribute__((export_name("crc"))) int crc(int rounds) {
    for (u32 i = 0; i < 256; i++) {
        u32 c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    static unsigned char buf[4096];
    seed = 7;
    for (int i = 0; i < 4096; i++) buf[i] = (unsigned char)next();
    u32 c = 0xffffffffu;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 4096; i++) c = crc_table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
    return (int)~c;
}

#define N 64
static double a[N][N], b[N][N], m[N][N];

__attribute__((export_name("matmul"))) int matmul(int rounds) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            a[i][j] = (double)(i * N + j) / 1000.0;
            b[i][j] = (double)(j * N + i) / 500.0;
        }
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < N; k++) s += a[i][k] * b[k][j];
                m[i][j] = s + r;
            }
    return (int)m[N / 2][N / 3];
}

static unsigned char composite[1 << 20];

__attribute__((export_name("sieve"))) int sieve(int n) {
    if (n > (1 << 20)) n = 1 << 20;
    for (int i = 0; i < n; i++) composite[i] = 0;
    int count = 0;
    for (int i = 2; i < n; i++) {
        if (composite[i]) continue;
        count++;
        for (int j = i + i; j < n; j += i) composite[j] = 1;
    }
    return count;
}

static u64 fib(int n) { return n < 2 ? (u64)n : fib(n - 1) + fib(n - 2); }

__attribute__((export_name("fib"))) int fib_export(int n) { return (int)fib(n); }
