/* Two instances of one bundle (named `model`, one input, one output) running at the same time
 * from two threads, each with its own context and arena, on different inputs: every output
 * must equal the expected bytes, and nothing may be allocated while they run.
 *
 *   two_instances WEIGHTS BATCH ITERATIONS IN_A EXPECTED_A IN_B EXPECTED_B
 *
 * (raw bytes). Instance A runs on a pool of 2 threads, B on its calling thread alone. Prints
 * "runs=R mismatches=M allocations=N" and exits 0 when M and N are 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* malloc, calloc and realloc counted while `counting` is set (glibc's own functions do the
 * work; free needs no wrapper). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static atomic_int counting, allocations;

void *malloc(size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&allocations, 1);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    if (atomic_load(&counting)) atomic_fetch_add(&allocations, 1);
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    if (atomic_load(&counting)) atomic_fetch_add(&allocations, 1);
    return __libc_realloc(p, n);
}

static void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *data = aligned_alloc(64, ((size_t)n + 64) / 64 * 64);
    if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    *size = (size_t)n;
    return data;
}

typedef struct instance {
    lb_ctx *ctx;
    const void *weights;
    void *arena, *output;
    const void *input, *expected;
    size_t out_bytes;
    int64_t batch;
    int iterations, runs, mismatches;
    pthread_barrier_t *start, *stop;
} instance;

static void *work(void *arg) {
    instance *s = (instance *)arg;
    const void *in[1] = {s->input};
    void *out[1] = {s->output};
    pthread_barrier_wait(s->start);
    for (int i = 0; i < s->iterations; i++) {
        memset(s->output, 0xA5, s->out_bytes);
        if (model_run(s->ctx, s->weights, s->arena, s->batch, in, out) != LB_OK ||
            memcmp(s->output, s->expected, s->out_bytes) != 0)
            s->mismatches++;
        s->runs++;
    }
    pthread_barrier_wait(s->stop);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: two_instances WEIGHTS BATCH ITERATIONS IN_A EXP_A IN_B EXP_B\n");
        return 2;
    }
    size_t wsize, n;
    const void *weights = read_file(argv[1], &wsize);
    if (model_check_weights(weights, wsize) != LB_OK) return 2;
    int64_t batch = atoll(argv[2]);
    pthread_barrier_t start, stop;
    pthread_barrier_init(&start, NULL, 3);
    pthread_barrier_init(&stop, NULL, 3);
    instance s[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        memset(&s[i], 0, sizeof(s[i]));
        s[i].ctx = lb_ctx_create(i == 0 ? 2 : 1, MODEL_ISA);
        s[i].weights = weights;
        s[i].arena = aligned_alloc(64, ((size_t)MODEL_ARENA_BYTES(batch) + 64) / 64 * 64);
        s[i].input = read_file(argv[4 + 2 * i], &n);
        s[i].expected = read_file(argv[5 + 2 * i], &s[i].out_bytes);
        s[i].output = aligned_alloc(64, (s[i].out_bytes + 64) / 64 * 64);
        s[i].batch = batch;
        s[i].iterations = atoi(argv[3]);
        s[i].start = &start;
        s[i].stop = &stop;
        if (!s[i].ctx || s[i].ctx->isa != MODEL_ISA || !s[i].arena || !s[i].output) return 2;
        pthread_create(&threads[i], NULL, work, &s[i]);
    }
    atomic_store(&counting, 1);
    pthread_barrier_wait(&start);
    pthread_barrier_wait(&stop);
    atomic_store(&counting, 0);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    int runs = s[0].runs + s[1].runs, mismatches = s[0].mismatches + s[1].mismatches;
    printf("runs=%d mismatches=%d allocations=%d\n", runs, mismatches,
           atomic_load(&allocations));
    for (int i = 0; i < 2; i++) lb_ctx_destroy(s[i].ctx);
    return mismatches || atomic_load(&allocations) ? 1 : 0;
}
