/* Instruction-set detection, the execution context and its thread pool. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#ifndef LB_NO_THREADS
#include <pthread.h>
#include <sched.h>
/* Linux: workers are kept off the caller's CPU (see the pool below). */
#if defined(__linux__) && !defined(__ANDROID__) && !defined(LB_NO_AFFINITY)
#define LB_POOL_AFFINITY 1
#else
#define LB_POOL_AFFINITY 0
#endif
#endif

#include <time.h>

double lb_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- instruction-set detection ----------------------------------------------------------- */

#if LB_HAVE_X86
#include <cpuid.h>

static uint64_t lb_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* cpuid and xgetbv directly: __builtin_cpu_supports answered 0 for AVX2 and AVX512-VNNI under
 * some toolchains on CPUs that have them (../shared/BACKEND_NOTES.md). */
static int lb_detect_cpu(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return LB_ISA_SCALAR;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
    if (!osxsave) return LB_ISA_SCALAR;
    uint64_t xcr0 = lb_xgetbv0();
    int ymm_saved = (xcr0 & 0x6) == 0x6;    /* SSE and AVX state */
    int zmm_saved = (xcr0 & 0xe6) == 0xe6;  /* plus opmask and both halves of ZMM */
    if (__get_cpuid_max(0, 0) < 7) return LB_ISA_SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    int avx2 = (b >> 5) & 1, bmi2 = (b >> 8) & 1;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1;
    int avx512vl = (b >> 31) & 1, vnni = (c >> 11) & 1;
    int amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
    int tiles_saved = (xcr0 & 0x60000) == 0x60000; /* XTILECFG and XTILEDATA */
    if (zmm_saved && avx512f && avx512bw && avx512vl && avx512dq && vnni && avx2 && fma)
        return amx_tile && amx_int8 && tiles_saved ? LB_ISA_AMX : LB_ISA_AVX512VNNI;
    if (ymm_saved && avx2 && fma && bmi2) return LB_ISA_AVX2;
    return LB_ISA_SCALAR;
}

#if LB_HAVE_AMX
#include <sys/syscall.h>
#include <unistd.h>

/* Linux gives a process the AMX tile data state (8 KB per thread) only when asked, once, for
 * the whole process; without it the first tile instruction raises SIGILL. */
static int lb_amx_permitted(void) {
    static _Atomic int state = 0; /* 0 not asked yet, 1 granted, -1 refused */
    int s = atomic_load(&state);
    if (s == 0) {
        const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
        s = syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0 ? 1 : -1;
        atomic_store(&state, s);
    }
    return s == 1;
}
#endif

int lb_detect_isa(void) { /* the best the CPU has among the paths this build holds */
    int cpu = lb_detect_cpu();
#if LB_HAVE_AMX
    if (cpu == LB_ISA_AMX && lb_amx_permitted()) return LB_ISA_AMX;
#endif
    if (cpu >= LB_ISA_AVX512VNNI && LB_HAVE_AVX512) return LB_ISA_AVX512VNNI;
    if (cpu >= LB_ISA_AVX2 && LB_HAVE_AVX2) return LB_ISA_AVX2;
    return LB_ISA_SCALAR;
}
#elif LB_HAVE_NEON
#if LB_HAVE_DOTPROD && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

int lb_detect_isa(void) {
#if LB_HAVE_DOTPROD && defined(__linux__)
    if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) return LB_ISA_DOTPROD;
#elif LB_HAVE_DOTPROD && defined(__APPLE__)
    return LB_ISA_DOTPROD; /* every Apple 64-bit ARM CPU has it */
#endif
    return LB_ISA_NEON;
}
#else
int lb_detect_isa(void) { return LB_ISA_SCALAR; }
#endif

int lb_isa_supported(int isa) {
    int best = lb_detect_isa();
    if (isa == LB_ISA_SCALAR) return 1;
    if (isa == LB_ISA_AMX) return best == LB_ISA_AMX;
    if (isa == LB_ISA_AVX2 || isa == LB_ISA_AVX512VNNI)
        return (best <= LB_ISA_AVX512VNNI || best == LB_ISA_AMX) &&
               isa <= (best == LB_ISA_AMX ? LB_ISA_AVX512VNNI : best);
    if (isa == LB_ISA_NEON || isa == LB_ISA_DOTPROD)
        return (best == LB_ISA_NEON || best == LB_ISA_DOTPROD) && isa <= best;
    return 0;
}

static const char *const lb_isa_names[LB_ISA_COUNT] = {"scalar", "avx2",    "vnni",
                                                       "neon",   "dotprod", "amx"};

const char *lb_isa_name(int isa) {
    return (isa >= 0 && isa < LB_ISA_COUNT) ? lb_isa_names[isa] : "unknown";
}

int lb_isa_from_name(const char *name) {
    for (int i = 0; i < LB_ISA_COUNT; i++)
        if (strcmp(name, lb_isa_names[i]) == 0) return i;
    return -1;
}

/* ---- thread pool -------------------------------------------------------------------------
 * Workers wait for a job on a condition variable after a short spin (consecutive kernels of
 * one inference follow each other within microseconds; between inferences they sleep, and a
 * process sharing the cores never finds them spinning for long). The caller works on the job
 * too. Tasks are claimed from one atomic word holding the job's generation and the next task,
 * so a worker that wakes late (another process had its core) finds the job finished and
 * claims nothing, and the caller waits only for tasks actually claimed, never for a worker
 * that has not started. On Linux the workers are kept off the caller's CPU while it works
 * (lb_pool_keep_off) and let go when it sleeps waiting for them (lb_pool_release). */

#ifndef LB_NO_THREADS
#define LB_SPIN_ROUNDS 4000

struct lb_pool {
    pthread_mutex_t run_mu; /* one job at a time (callers from several threads queue here) */
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    pthread_t *threads;
    int nworkers;
    atomic_int stop;
    atomic_uint_fast64_t state; /* generation << 32 | next task */
    atomic_int_fast64_t done;   /* tasks of the current job finished */
    /* the current job, written before its generation is published */
    lb_task_fn fn;
    void *arg;
    int64_t ntasks;
    /* debug counters (lb_pool_stats_attach): NULL unless attached, written by the caller */
    int64_t *stats;
    int64_t stats_steps, step, step_t0;
    atomic_int stats_on;                   /* workers time their tasks */
    atomic_int_fast64_t w_busy_ns, w_join, w_last; /* of the current job, when stats_on */
    atomic_int sleeping;                   /* workers in pthread_cond_wait */
#if LB_POOL_AFFINITY
    cpu_set_t allowed; /* the CPUs the creating thread could run on */
    int kept_off;      /* the CPU the workers are kept off (the caller's), -1 for none */
#endif
};

typedef struct lb_worker_start {
    lb_pool *pool;
    int index;
} lb_worker_start;

static inline void lb_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static inline uint32_t lb_gen(uint64_t state) { return (uint32_t)(state >> 32); }

static int64_t lb_wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claim and run tasks of generation `gen` until none is left (or a newer job started); the
 * number of tasks run. */
static int64_t lb_run_tasks(lb_pool *p, uint32_t gen, int worker) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    int64_t ran = 0;
    for (;;) {
        if (lb_gen(s) != gen) return ran;
        int64_t t = (int64_t)(s & 0xffffffffu);
        if (t >= p->ntasks) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        if (worker != 0 && atomic_load_explicit(&p->stats_on, memory_order_relaxed)) {
            int64_t t0 = lb_wall_ns(), none = 0;
            atomic_compare_exchange_strong(&p->w_join, &none, t0); /* the first claim */
            p->fn(p->arg, t, worker);
            int64_t t1 = lb_wall_ns();
            atomic_fetch_add(&p->w_busy_ns, t1 - t0); /* before `done` counts it */
            atomic_store(&p->w_last, t1);
        } else {
            p->fn(p->arg, t, worker);
        }
        ran++;
        int64_t d = atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1;
        if (d == p->ntasks) { /* the last one: the caller may be asleep */
            pthread_mutex_lock(&p->mu);
            pthread_cond_broadcast(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

static void *lb_worker_main(void *raw) {
    lb_worker_start start = *(lb_worker_start *)raw;
    free(raw);
    lb_pool *p = start.pool;
    uint32_t seen = 0;
    for (;;) {
        uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
        for (int i = 0; lb_gen(s) == seen && i < LB_SPIN_ROUNDS; i++) {
            lb_cpu_relax();
            s = atomic_load_explicit(&p->state, memory_order_acquire);
        }
        if (lb_gen(s) == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);
            while (!atomic_load(&p->stop) && lb_gen(atomic_load(&p->state)) == seen)
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            s = atomic_load_explicit(&p->state, memory_order_acquire);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = lb_gen(s);
        lb_run_tasks(p, seen, start.index);
    }
}

#if LB_POOL_AFFINITY
/* Keep the workers off the CPU the caller runs on. Without this the kernel often wakes a
 * sleeping worker onto the waker's CPU (when the other CPU is busy: another process, or
 * another runtime's threads still spinning) and it stays there: it cannot run while the
 * caller works, or it preempts the caller, and the job runs at one thread's speed with the
 * worker's spin taking the caller's time besides. The mask changes only when the caller
 * moves to another CPU (one system call per worker then, none per job otherwise). */
static void lb_pool_keep_off(lb_pool *p) {
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == p->kept_off || cpu >= CPU_SETSIZE) return;
    cpu_set_t mask = p->allowed;
    if (!CPU_ISSET(cpu, &mask)) return;
    CPU_CLR(cpu, &mask);
    if (CPU_COUNT(&mask) == 0) return;
    for (int i = 0; i < p->nworkers; i++)
        pthread_setaffinity_np(p->threads[i], sizeof(mask), &mask);
    p->kept_off = cpu;
}

/* Let the workers run anywhere again: called when the caller is about to sleep until a
 * worker finishes its task (its CPU is then free, and a worker preempted on its own CPU by
 * another process may move there instead of waiting for its turn). */
static void lb_pool_release(lb_pool *p) {
    if (p->kept_off < 0) return;
    for (int i = 0; i < p->nworkers; i++)
        pthread_setaffinity_np(p->threads[i], sizeof(p->allowed), &p->allowed);
    p->kept_off = -1;
}
#endif

static lb_pool *lb_pool_create(int nworkers) {
    lb_pool *p = (lb_pool *)calloc(1, sizeof(lb_pool));
    if (!p) return NULL;
    p->threads = (pthread_t *)calloc((size_t)nworkers, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    atomic_init(&p->stop, 0);
    atomic_init(&p->state, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stats_on, 0);
    atomic_init(&p->w_busy_ns, 0);
    atomic_init(&p->w_join, 0);
    atomic_init(&p->w_last, 0);
    atomic_init(&p->sleeping, 0);
#if LB_POOL_AFFINITY
    p->kept_off = -1;
    if (sched_getaffinity(0, sizeof(p->allowed), &p->allowed) != 0) CPU_ZERO(&p->allowed);
#endif
    for (int i = 0; i < nworkers; i++) {
        lb_worker_start *s = (lb_worker_start *)malloc(sizeof(lb_worker_start));
        if (!s) break;
        s->pool = p;
        s->index = i + 1;
        if (pthread_create(&p->threads[i], NULL, lb_worker_main, s) != 0) {
            free(s);
            break;
        }
        p->nworkers++;
    }
    return p;
}

static void lb_pool_destroy(lb_pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    free(p->threads);
    free(p);
}

/* The attached counters of the current step, or NULL. */
static int64_t *lb_pool_counters(lb_pool *p) {
    if (!p->stats || p->step < 0 || p->step >= p->stats_steps) return NULL;
    return p->stats + p->step * LB_POOL_STATS_FIELDS;
}

static void lb_pool_run(lb_pool *p, int64_t ntasks, lb_task_fn fn, void *arg) {
    pthread_mutex_lock(&p->run_mu);
    int64_t *counters = lb_pool_counters(p);
    int64_t t_start = counters ? lb_wall_ns() : 0, t_own = 0;
#if LB_POOL_AFFINITY
    lb_pool_keep_off(p);
#endif
    /* Close the previous job before touching the job fields: a worker that read its state
     * just before it ended could otherwise compare a stale task index with the new task count
     * and claim a task that does not exist (counted as done in the new job). */
    uint64_t old = atomic_load(&p->state);
    atomic_store(&p->state, (old & ~(uint64_t)0xffffffffu) | 0xffffffffu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    int asleep = 0;
    if (counters) {
        atomic_store(&p->w_busy_ns, 0);
        atomic_store(&p->w_join, 0);
        atomic_store(&p->w_last, 0);
        asleep = atomic_load(&p->sleeping) > 0;
        t_start = lb_wall_ns();
    }
    uint32_t gen = lb_gen(atomic_load(&p->state)) + 1;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->state, (uint64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    int64_t own = lb_run_tasks(p, gen, 0);
    if (counters) t_own = lb_wall_ns();
    for (int i = 0; atomic_load_explicit(&p->done, memory_order_acquire) < ntasks &&
                    i < LB_SPIN_ROUNDS; i++)
        lb_cpu_relax();
    if (atomic_load_explicit(&p->done, memory_order_acquire) < ntasks) {
#if LB_POOL_AFFINITY
        lb_pool_release(p);
#endif
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->done) < ntasks) pthread_cond_wait(&p->finished, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    if (counters) {
        int64_t t_end = lb_wall_ns();
        counters[LB_PS_JOBS] += 1;
        counters[LB_PS_TASKS] += ntasks;
        counters[LB_PS_CALLER_TASKS] += own;
        counters[LB_PS_ALONE_JOBS] += own == ntasks;
        counters[LB_PS_JOB_NS] += t_end - t_start;
        counters[LB_PS_WAIT_NS] += t_end - t_own;
        counters[LB_PS_WORKER_NS] += atomic_load(&p->w_busy_ns);
        int64_t join = atomic_load(&p->w_join);
        if (join) counters[LB_PS_JOIN_NS] += join - t_start;
        int64_t last = atomic_load(&p->w_last);
        if (last) counters[LB_PS_WORKER_TAIL_NS] += t_end - last;
        counters[LB_PS_ASLEEP_JOBS] += asleep;
    }
    pthread_mutex_unlock(&p->run_mu);
}
#endif /* LB_NO_THREADS */

lb_ctx *lb_ctx_create(int threads, int isa) {
    lb_ctx *ctx = (lb_ctx *)calloc(1, sizeof(lb_ctx));
    if (!ctx) return NULL;
    int best = lb_detect_isa();
    ctx->isa = lb_isa_supported(isa) ? isa : best;
    ctx->amx = ctx->isa == LB_ISA_AMX;
    if (ctx->amx) ctx->isa = LB_ISA_AVX512VNNI;
    ctx->threads = 1;
#ifndef LB_NO_THREADS
    if (threads > 1) {
        ctx->pool = lb_pool_create(threads - 1);
        if (!ctx->pool) {
            free(ctx);
            return NULL;
        }
        ctx->threads = 1 + ctx->pool->nworkers;
    }
#else
    (void)threads;
#endif
    return ctx;
}

void lb_ctx_destroy(lb_ctx *ctx) {
    if (!ctx) return;
#ifndef LB_NO_THREADS
    if (ctx->pool) lb_pool_destroy(ctx->pool);
#endif
    free(ctx);
}

int lb_pool_stats_attach(const lb_ctx *ctx, int64_t *counters, int64_t nsteps) {
#ifndef LB_NO_THREADS
    if (!ctx->pool) return 0;
    pthread_mutex_lock(&ctx->pool->run_mu);
    ctx->pool->stats = counters;
    ctx->pool->stats_steps = counters ? nsteps : 0;
    ctx->pool->step = -1;
    atomic_store(&ctx->pool->stats_on, counters != NULL);
    pthread_mutex_unlock(&ctx->pool->run_mu);
    return counters != NULL;
#else
    (void)ctx, (void)counters, (void)nsteps;
    return 0;
#endif
}

void lb_pool_step(const lb_ctx *ctx, int64_t step) {
#ifndef LB_NO_THREADS
    lb_pool *p = ctx->pool;
    if (!p || !p->stats) return;
    if (step >= 0) {
        p->step = step;
        p->step_t0 = lb_wall_ns();
        return;
    }
    int64_t *counters = lb_pool_counters(p);
    if (counters) counters[LB_PS_STEP_NS] += lb_wall_ns() - p->step_t0;
    p->step = -1;
#else
    (void)ctx, (void)step;
#endif
}

void lb_parallel_for(const lb_ctx *ctx, int64_t ntasks, lb_task_fn fn, void *arg) {
    if (ntasks <= 0) return;
#ifndef LB_NO_THREADS
    if (ctx->pool && ntasks > 1 && ntasks < 0xffffffffu) {
        lb_pool_run(ctx->pool, ntasks, fn, arg);
        return;
    }
    if (ctx->pool && ctx->pool->stats) {
        int64_t *counters = lb_pool_counters(ctx->pool);
        if (counters) counters[LB_PS_INLINE] += 1;
    }
#else
    (void)ctx;
#endif
    for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
}

void lb_parallel_for_sized(const lb_ctx *ctx, int64_t ntasks, int64_t bytes, lb_task_fn fn,
                           void *arg) {
    if (bytes >= LB_INLINE_BYTES) {
        lb_parallel_for(ctx, ntasks, fn, arg);
        return;
    }
#ifndef LB_NO_THREADS
    if (ctx->pool && ctx->pool->stats) {
        int64_t *counters = lb_pool_counters(ctx->pool);
        if (counters) counters[LB_PS_INLINE] += 1;
    }
#endif
    for (int64_t t = 0; t < ntasks; t++) fn(arg, t, 0);
}
