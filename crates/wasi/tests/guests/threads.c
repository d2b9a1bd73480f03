// Threads of a wasm32-wasip1-threads program (wasi-threads): workers that add into a sum
// under a mutex and into an atomic counter, a condition variable that hands work out one
// item at a time, and joins. The output depends on nothing but the program. With the
// argument `exit`, a thread ends the program with `exit(3)` while the main thread waits;
// with `trap`, a thread traps.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define ROUNDS 10000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
static long long sum = 0;
static atomic_int counter = 0;
static int item = -1; // the item handed out, -1 while none
static int taken = 0;

static void *work(void *arg) {
  int id = (int)(long)arg;
  for (int i = 0; i < ROUNDS; i++) {
    pthread_mutex_lock(&lock);
    sum += id * ROUNDS + i;
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&counter, 1);
  }
  // Take one item: wait until the main thread hands one out.
  pthread_mutex_lock(&lock);
  while (item < 0)
    pthread_cond_wait(&ready, &lock);
  taken += item;
  item = -1;
  pthread_cond_broadcast(&ready);
  pthread_mutex_unlock(&lock);
  return (void *)(long)(id * id);
}

static void *ender(void *arg) {
  if (arg)
    __builtin_trap();
  exit(3);
}

int main(int argc, char **argv) {
  pthread_t t[THREADS];
  if (argc > 1) {
    printf("ending from a thread\n");
    fflush(stdout);
    pthread_t e;
    pthread_create(&e, NULL, ender, (void *)(long)(strcmp(argv[1], "trap") == 0));
    pthread_join(e, NULL);
    printf("not reached\n");
  }
  for (long i = 0; i < THREADS; i++) {
    if (pthread_create(&t[i], NULL, work, (void *)i) != 0) {
      printf("pthread_create failed\n");
      return 1;
    }
  }
  for (int n = 1; n <= THREADS; n++) {
    pthread_mutex_lock(&lock);
    while (item >= 0)
      pthread_cond_wait(&ready, &lock);
    item = n * 100;
    pthread_cond_broadcast(&ready);
    pthread_mutex_unlock(&lock);
  }
  long squares = 0;
  for (int i = 0; i < THREADS; i++) {
    void *r;
    pthread_join(t[i], &r);
    squares += (long)r;
  }
  printf("threads: %d\n", THREADS);
  printf("sum: %lld\n", sum);
  printf("counter: %d\n", atomic_load(&counter));
  printf("items taken: %d\n", taken);
  printf("squares: %ld\n", squares);
  return 0;
}
