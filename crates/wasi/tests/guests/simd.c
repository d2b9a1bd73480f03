// SIMD against scalar code, in one guest: every check computes the same thing with
// wasm_simd128.h intrinsics (and loops clang vectorises) and with plain scalar C, and compares.
// Prints "simd: N checks passed" or the first mismatch (exit status 1). Built with -msimd128.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <wasm_simd128.h>

#define N 256

static uint8_t bytes[N];
static int16_t shorts[N];
static float floats[N];
static int checks;

static uint32_t state = 12345;
static uint32_t next(void) {
  state = state * 1103515245u + 12345u;
  return state >> 8;
}

static int fail(const char *what, int i, long long simd, long long scalar) {
  printf("simd: %s differs at %d: %lld (simd) against %lld (scalar)\n", what, i, simd, scalar);
  return 1;
}

// Saturating 8-bit adds, min, max and averages.
static int bytes_arith(void) {
  for (int i = 0; i < N; i += 16) {
    v128_t a = wasm_v128_load(&bytes[i]);
    v128_t b = wasm_v128_load(&bytes[(i + 16) % N]);
    uint8_t out[4][16];
    wasm_v128_store(out[0], wasm_u8x16_add_sat(a, b));
    wasm_v128_store(out[1], wasm_i8x16_sub_sat(a, b));
    wasm_v128_store(out[2], wasm_u8x16_avgr(a, b));
    wasm_v128_store(out[3], wasm_i8x16_min(a, b));
    for (int j = 0; j < 16; j++) {
      int x = bytes[i + j], y = bytes[(i + 16 + j) % N];
      int sx = (int8_t)x, sy = (int8_t)y;
      int add = x + y > 255 ? 255 : x + y;
      int sub = sx - sy > 127 ? 127 : sx - sy < -128 ? -128 : sx - sy;
      int avg = (x + y + 1) / 2;
      int min = sx < sy ? sx : sy;
      if (out[0][j] != add) return fail("u8x16.add_sat", i + j, out[0][j], add);
      if ((int8_t)out[1][j] != sub) return fail("i8x16.sub_sat", i + j, (int8_t)out[1][j], sub);
      if (out[2][j] != avg) return fail("u8x16.avgr", i + j, out[2][j], avg);
      if ((int8_t)out[3][j] != min) return fail("i8x16.min", i + j, (int8_t)out[3][j], min);
    }
  }
  checks++;
  return 0;
}

// Shuffles and swizzles: reversing, interleaving, table lookups.
static int shuffles(void) {
  for (int i = 0; i < N; i += 16) {
    v128_t a = wasm_v128_load(&bytes[i]);
    v128_t b = wasm_v128_load(&bytes[(i + 16) % N]);
    uint8_t rev[16], mix[16], look[16];
    wasm_v128_store(rev, wasm_i8x16_shuffle(a, a, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    wasm_v128_store(mix, wasm_i8x16_shuffle(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23));
    // Indices past 15 select zero.
    wasm_v128_store(look, wasm_i8x16_swizzle(a, wasm_u8x16_shr(b, 3)));
    for (int j = 0; j < 16; j++) {
      int idx = bytes[(i + 16 + j) % N] >> 3;
      int expect_look = idx < 16 ? bytes[i + idx] : 0;
      int expect_mix = j % 2 ? bytes[(i + 16 + j / 2) % N] : bytes[i + j / 2];
      if (rev[j] != bytes[i + 15 - j]) return fail("shuffle (reverse)", i + j, rev[j], bytes[i + 15 - j]);
      if (mix[j] != expect_mix) return fail("shuffle (interleave)", i + j, mix[j], expect_mix);
      if (look[j] != expect_look) return fail("swizzle", i + j, look[j], expect_look);
    }
  }
  checks++;
  return 0;
}

// 16-bit: widening multiplies, the dot product, narrowing with saturation, q15 multiplies.
static int shorts_arith(void) {
  for (int i = 0; i < N; i += 8) {
    v128_t a = wasm_v128_load(&shorts[i]);
    v128_t b = wasm_v128_load(&shorts[(i + 8) % N]);
    int32_t lo[4], dot[4];
    int8_t narrow[16];
    int16_t q15[8];
    wasm_v128_store(lo, wasm_i32x4_extmul_low_i16x8(a, b));
    wasm_v128_store(dot, wasm_i32x4_dot_i16x8(a, b));
    wasm_v128_store(narrow, wasm_i8x16_narrow_i16x8(a, b));
    wasm_v128_store(q15, wasm_i16x8_q15mulr_sat(a, b));
    for (int j = 0; j < 4; j++) {
      int32_t x = shorts[i + j], y = shorts[(i + 8 + j) % N];
      int32_t d = shorts[i + 2 * j] * shorts[(i + 8 + 2 * j) % N] +
                  shorts[i + 2 * j + 1] * shorts[(i + 8 + 2 * j + 1) % N];
      if (lo[j] != x * y) return fail("i32x4.extmul_low_i16x8", i + j, lo[j], x * y);
      if (dot[j] != d) return fail("i32x4.dot_i16x8", i + j, dot[j], d);
    }
    for (int j = 0; j < 16; j++) {
      int v = j < 8 ? shorts[i + j] : shorts[(i + j) % N];
      int s = v > 127 ? 127 : v < -128 ? -128 : v;
      if (narrow[j] != s) return fail("i8x16.narrow_i16x8", i + j, narrow[j], s);
    }
    for (int j = 0; j < 8; j++) {
      int32_t p = (shorts[i + j] * shorts[(i + 8 + j) % N] + 0x4000) >> 15;
      int32_t s = p > 32767 ? 32767 : p;
      if (q15[j] != s) return fail("i16x8.q15mulr_sat", i + j, q15[j], s);
    }
  }
  checks++;
  return 0;
}

// Lane-wise float arithmetic is exact IEEE: bit-identical to scalar.
static int float_lanes(void) {
  for (int i = 0; i < N; i += 4) {
    v128_t a = wasm_v128_load(&floats[i]);
    v128_t b = wasm_v128_load(&floats[(i + 4) % N]);
    float out[5][4];
    int32_t conv[4];
    wasm_v128_store(out[0], wasm_f32x4_add(wasm_f32x4_mul(a, b), a));
    wasm_v128_store(out[1], wasm_f32x4_sqrt(wasm_f32x4_abs(a)));
    wasm_v128_store(out[2], wasm_f32x4_min(a, b));
    wasm_v128_store(out[3], wasm_f32x4_floor(wasm_f32x4_div(a, b)));
    wasm_v128_store(out[4], wasm_f32x4_nearest(a));
    wasm_v128_store(conv, wasm_i32x4_trunc_sat_f32x4(wasm_f32x4_mul(a, wasm_f32x4_splat(1e8f))));
    for (int j = 0; j < 4; j++) {
      float x = floats[i + j], y = floats[(i + 4 + j) % N];
      float expect[5] = {x * y + x, sqrtf(fabsf(x)), x < y ? x : y, floorf(x / y), nearbyintf(x)};
      for (int k = 0; k < 5; k++) {
        uint32_t got, want;
        memcpy(&got, &out[k][j], 4);
        memcpy(&want, &expect[k], 4);
        if (got != want) return fail("f32x4 lane", (i + j) * 8 + k, got, want);
      }
      float big = x * 1e8f;
      int32_t c = big >= 2147483648.0f ? INT32_MAX : big < -2147483648.0f ? INT32_MIN : (int32_t)big;
      if (conv[j] != c) return fail("i32x4.trunc_sat_f32x4", i + j, conv[j], c);
    }
  }
  checks++;
  return 0;
}

// Loops clang vectorises at -O2 -msimd128: a byte sum, a compare-and-count, a saxpy.
static int vectorised_loops(void) {
  uint32_t sum = 0, scalar_sum = 0;
  int count = 0, scalar_count = 0;
  for (int i = 0; i < N; i++) sum += bytes[i];
  for (int i = 0; i < N; i++) count += bytes[i] > 100;
  for (volatile int i = 0; i < N; i++) scalar_sum += bytes[i];
  for (volatile int i = 0; i < N; i++) scalar_count += bytes[i] > 100;
  if (sum != scalar_sum) return fail("vectorised sum", 0, sum, scalar_sum);
  if (count != scalar_count) return fail("vectorised count", 0, count, scalar_count);
  int32_t y[N], z[N];
  for (int i = 0; i < N; i++) y[i] = 3 * shorts[i] + bytes[i];
  for (volatile int i = 0; i < N; i++) z[i] = 3 * shorts[i] + bytes[i];
  for (int i = 0; i < N; i++)
    if (y[i] != z[i]) return fail("vectorised saxpy", i, y[i], z[i]);
  checks++;
  return 0;
}

// Any/all-true and bitmasks against a scalar scan.
static int masks(void) {
  for (int i = 0; i < N; i += 16) {
    v128_t a = wasm_v128_load(&bytes[i]);
    v128_t big = wasm_u8x16_gt(a, wasm_u8x16_splat(128));
    uint32_t mask = wasm_i8x16_bitmask(big), expect = 0;
    for (int j = 0; j < 16; j++) expect |= (uint32_t)(bytes[i + j] > 128) << j;
    if (mask != expect) return fail("i8x16.bitmask", i, mask, expect);
    if (wasm_v128_any_true(big) != (expect != 0)) return fail("v128.any_true", i, !expect, expect);
    if (wasm_i8x16_all_true(big) != (expect == 0xffff)) return fail("i8x16.all_true", i, 0, expect);
  }
  checks++;
  return 0;
}

int main(void) {
  for (int i = 0; i < N; i++) {
    bytes[i] = (uint8_t)next();
    shorts[i] = (int16_t)next();
    floats[i] = (float)((int32_t)next() - (1 << 23)) / (float)(next() % 1000 + 1);
  }
  if (bytes_arith() || shuffles() || shorts_arith() || float_lanes() || vectorised_loops() ||
      masks())
    return 1;
  printf("simd: %d checks passed\n", checks);
  return 0;
}
