/* example_main.c: runs the model of @name@.h on NumPy .npy files.
 *
 *   ./@name@ [--threads N] [--weights FILE] INPUT.npy... OUTPUT.npy...
 *
 * The inputs in the model's input order, then the output paths in its output order (listed in
 * @name@.h). Each input must have the dtype and shape the model takes (the batch size, where the
 * model has one, may be any, the same for every input). --threads 1 (the default) runs on the
 * calling thread alone; N > 1 starts a pool of N - 1 threads. Exit status 0, or 1 with a message
 * naming the file and the problem.
 *
 * Everything is allocated before the model runs; the model itself allocates nothing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "@name@.h"

#define NPY_MAX_RANK 8

typedef struct npy_array {
    int32_t type;
    int rank;
    int64_t shape[NPY_MAX_RANK];
    void *data;
    size_t nbytes;
} npy_array;

/* NumPy's descr of each element type (little-endian, as x86-64 and 64-bit ARM Linux store). */
static const struct {
    int32_t type;
    const char *descr;
    size_t size;
    const char *name;
} npy_types[] = {
    {LB_F32, "<f4", 4, "float32"}, {LB_U8, "|u1", 1, "uint8"},   {LB_I8, "|i1", 1, "int8"},
    {LB_I16, "<i2", 2, "int16"},   {LB_U16, "<u2", 2, "uint16"}, {LB_I32, "<i4", 4, "int32"},
    {LB_I64, "<i8", 8, "int64"},   {LB_F64, "<f8", 8, "float64"}, {LB_BOOL, "|b1", 1, "bool"},
};
#define NPY_NTYPES (sizeof(npy_types) / sizeof(npy_types[0]))

static int type_index(int32_t type) {
    for (size_t i = 0; i < NPY_NTYPES; i++)
        if (npy_types[i].type == type) return (int)i;
    return -1;
}

static const char *type_name(int32_t type) {
    int i = type_index(type);
    return i < 0 ? "unknown" : npy_types[i].name;
}

static void *aligned_bytes(size_t n) {
    size_t rounded = (n + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

/* The value of `key` in a .npy header dict, or NULL. */
static const char *npy_field(const char *header, const char *key) {
    const char *at = strstr(header, key);
    if (!at) return NULL;
    at = strchr(at + strlen(key), ':');
    if (!at) return NULL;
    at++;
    while (*at == ' ') at++;
    return at;
}

/* Reads an .npy file; 0 on success, else prints why (naming the file) and returns 1. */
static int npy_read(const char *path, npy_array *a) {
    memset(a, 0, sizeof(*a));
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    unsigned char magic[10];
    char *header = NULL;
    int ok = 0;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6) != 0) {
        fprintf(stderr, "error: %s is not a .npy file\n", path);
        goto done;
    }
    size_t hlen;
    if (magic[6] == 1) {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) goto truncated;
        hlen = (size_t)b[0] | (size_t)b[1] << 8;
    } else if (magic[6] == 2 || magic[6] == 3) {
        unsigned char b[4];
        if (fread(b, 1, 4, f) != 4) goto truncated;
        hlen = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    } else {
        fprintf(stderr, "error: %s: .npy format version %d is not supported\n", path, magic[6]);
        goto done;
    }
    header = (char *)malloc(hlen + 1);
    if (!header || fread(header, 1, hlen, f) != hlen) goto truncated;
    header[hlen] = 0;
    const char *descr = npy_field(header, "'descr'");
    const char *order = npy_field(header, "'fortran_order'");
    const char *shape = npy_field(header, "'shape'");
    if (!descr || !order || !shape || *descr != '\'' || *shape != '(') {
        fprintf(stderr, "error: %s: malformed .npy header\n", path);
        goto done;
    }
    if (strncmp(order, "False", 5) != 0) {
        fprintf(stderr, "error: %s is in Fortran order; save it in C order "
                        "(numpy.ascontiguousarray)\n", path);
        goto done;
    }
    size_t size = 0;
    a->type = -1;
    for (size_t i = 0; i < NPY_NTYPES; i++) {
        const char *d = npy_types[i].descr;
        /* one-byte types may be written with any byte-order mark */
        int same = strncmp(descr + 1, d, 3) == 0 ||
                   (npy_types[i].size == 1 && strncmp(descr + 2, d + 1, 2) == 0);
        if (same && descr[4] == '\'') {
            a->type = npy_types[i].type;
            size = npy_types[i].size;
            break;
        }
    }
    if (a->type < 0) {
        const char *end = strchr(descr + 1, '\'');
        fprintf(stderr, "error: %s holds elements of type %.*s, which no model takes "
                        "(little-endian numbers only)\n", path,
                (int)(end ? end - descr - 1 : 8), descr + 1);
        goto done;
    }
    const char *p = shape + 1;
    while (*p && *p != ')') {
        char *end;
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || a->rank == NPY_MAX_RANK) {
            fprintf(stderr, "error: %s: malformed shape in the .npy header\n", path);
            goto done;
        }
        a->shape[a->rank++] = d;
        p = end;
    }
    size_t count = 1;
    for (int i = 0; i < a->rank; i++) count *= (size_t)a->shape[i];
    a->nbytes = count * size;
    a->data = aligned_bytes(a->nbytes);
    if (!a->data) {
        fprintf(stderr, "error: out of memory reading %s\n", path);
        goto done;
    }
    if (fread(a->data, 1, a->nbytes, f) != a->nbytes) goto truncated;
    ok = 1;
    goto done;
truncated:
    fprintf(stderr, "error: %s is truncated\n", path);
done:
    free(header);
    fclose(f);
    if (!ok) {
        free(a->data);
        a->data = NULL;
    }
    return ok ? 0 : 1;
}

/* Writes an .npy file (format 1.0); 0 on success, else prints why and returns 1. */
static int npy_write(const char *path, const npy_array *a) {
    char dict[256];
    int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     npy_types[type_index(a->type)].descr);
    for (int i = 0; i < a->rank; i++)
        n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%lld%s", (long long)a->shape[i],
                      a->rank == 1 ? "," : (i + 1 < a->rank ? ", " : ""));
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "), }");
    size_t total = (size_t)(10 + n + 1 + 63) / 64 * 64; /* magic, length, dict, '\n' */
    size_t hlen = total - 10;
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "error: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    unsigned char start[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                               (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    int ok = fwrite(start, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = (size_t)n; ok && i + 1 < hlen; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && fwrite(a->data, 1, a->nbytes, f) == a->nbytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        fprintf(stderr, "error: writing %s failed: %s\n", path, strerror(errno));
        remove(path);
    }
    return ok ? 0 : 1;
}

static void shape_text(const int64_t *shape, int rank, int64_t batch, char *out, size_t size) {
    size_t n = (size_t)snprintf(out, size, "[");
    for (int i = 0; i < rank && n < size; i++) {
        if (shape[i] < 0 && batch < 0)
            n += (size_t)snprintf(out + n, size - n, "%sbatch", i ? ", " : "");
        else
            n += (size_t)snprintf(out + n, size - n, "%s%lld", i ? ", " : "",
                                  (long long)(shape[i] < 0 ? batch : shape[i]));
    }
    if (n < size) snprintf(out + n, size - n, "]");
}

/* Checks input i's dtype and shape; its dimension marked -1 is the batch size, which must be
 * the same for every input (*batch: -1 until an input gives it). 0, or 1 with a message. */
static int check_input(int i, const char *path, const npy_array *a, int64_t *batch) {
    const lb_tensor_info *info = &@name@_inputs[i];
    char want[160], got[160];
    if (a->type != info->type) {
        fprintf(stderr, "error: input %d '%s' takes %s; %s holds %s\n", i, info->name,
                type_name(info->type), path, type_name(a->type));
        return 1;
    }
    int same = a->rank == info->rank;
    int64_t found = *batch;
    for (int d = 0; same && d < a->rank; d++) {
        if (info->shape[d] >= 0)
            same = a->shape[d] == info->shape[d];
        else if (found < 0)
            same = (found = a->shape[d]) >= 1;
        else
            same = a->shape[d] == found;
    }
    if (!same) {
        shape_text(info->shape, info->rank, *batch, want, sizeof(want));
        shape_text(a->shape, a->rank, 0, got, sizeof(got));
        fprintf(stderr, "error: input %d '%s' takes shape %s; %s has shape %s%s\n", i,
                info->name, want, path, got,
                *batch > 0 ? " (the batch size must be the same for every input)" : "");
        return 1;
    }
    *batch = found;
    return 0;
}

static void usage(FILE *to) {
    fprintf(to, "usage: @name@ [--threads N] [--weights FILE] INPUT.npy... OUTPUT.npy...\n"
                "  inputs (%d):", @NAME@_NUM_INPUTS);
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) fprintf(to, " %s", @name@_inputs[i].name);
    fprintf(to, "\n  outputs (%d):", @NAME@_NUM_OUTPUTS);
    for (int i = 0; i < @NAME@_NUM_OUTPUTS; i++) fprintf(to, " %s", @name@_outputs[i].name);
    fprintf(to, "\n");
}

/* The weights: embedded in the program, or read from FILE (default: @name@.weights beside the
 * program) and checked against the size and checksum the model was compiled with. */
static const void *load_weights(const char *program, const char *path, void **owned) {
    *owned = NULL;
#if @NAME@_WEIGHTS_EMBEDDED
    (void)program;
    if (!path) return @name@_weights;
#endif
    char guess[4096];
    if (!path) {
        const char *slash = strrchr(program, '/');
        int dir = slash ? (int)(slash - program) + 1 : 0;
        snprintf(guess, sizeof(guess), "%.*s@name@.weights", dir, program);
        path = guess;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: cannot open the weights %s: %s (give another with --weights)\n",
                path, strerror(errno));
        return NULL;
    }
    void *data = aligned_bytes(@NAME@_WEIGHTS_BYTES + 1);
    size_t n = data ? fread(data, 1, (size_t)@NAME@_WEIGHTS_BYTES + 1, f) : 0;
    fclose(f);
    if (!data || @name@_check_weights(data, n) != LB_OK) {
        fprintf(stderr, "error: %s is not the weights of @name@ (%zu bytes; expected %lld "
                        "with CRC-32 %08x): rebuild them together\n", path, n,
                (long long)@NAME@_WEIGHTS_BYTES, (unsigned)@NAME@_WEIGHTS_CRC32);
        free(data);
        return NULL;
    }
    *owned = data;
    return data;
}

int main(int argc, char **argv) {
    int threads = 1, first = 1;
    const char *weights_path = NULL;
    while (first < argc && strncmp(argv[first], "--", 2) == 0) {
        if (strcmp(argv[first], "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (first + 1 >= argc) break;
        if (strcmp(argv[first], "--threads") == 0) {
            char *end;
            long t = strtol(argv[first + 1], &end, 10);
            if (*end || t < 1 || t > 1024) {
                fprintf(stderr, "error: --threads takes a number from 1 to 1024, got %s\n",
                        argv[first + 1]);
                return 1;
            }
            threads = (int)t;
        } else if (strcmp(argv[first], "--weights") == 0) {
            weights_path = argv[first + 1];
        } else {
            break;
        }
        first += 2;
    }
    if (argc - first != @NAME@_NUM_INPUTS + @NAME@_NUM_OUTPUTS) {
        usage(stderr);
        return 1;
    }
    if (!lb_isa_supported(@NAME@_ISA)) {
        fprintf(stderr, "error: this CPU cannot run @name@: the bundle was built for target "
                        "%s, which needs %s; build it again with another --target\n",
                @NAME@_TARGET, @NAME@_TARGET_CPU);
        return 1;
    }

    npy_array inputs[@NAME@_NUM_INPUTS], outputs[@NAME@_NUM_OUTPUTS];
    const void *in_ptrs[@NAME@_NUM_INPUTS];
    void *out_ptrs[@NAME@_NUM_OUTPUTS];
    int64_t batch = -1;
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) {
        if (npy_read(argv[first + i], &inputs[i])) return 1;
        if (check_input(i, argv[first + i], &inputs[i], &batch)) return 1;
        in_ptrs[i] = inputs[i].data;
    }
    if (batch < 1) batch = 1;
    for (int i = 0; i < @NAME@_NUM_OUTPUTS; i++) {
        const lb_tensor_info *info = &@name@_outputs[i];
        npy_array *o = &outputs[i];
        o->type = info->type;
        o->rank = info->rank;
        size_t count = 1;
        for (int d = 0; d < info->rank; d++) {
            o->shape[d] = info->shape[d] < 0 ? batch : info->shape[d];
            count *= (size_t)o->shape[d];
        }
        o->nbytes = count * npy_types[type_index(o->type)].size;
        o->data = aligned_bytes(o->nbytes);
        if (!o->data) {
            fprintf(stderr, "error: out of memory\n");
            return 1;
        }
        out_ptrs[i] = o->data;
    }

    void *owned;
    const void *weights = load_weights(argv[0], weights_path, &owned);
    if (!weights) return 1;
    void *arena = aligned_bytes((size_t)@NAME@_ARENA_BYTES(batch));
    lb_ctx single = {@NAME@_ISA, 1, NULL, 0};
    lb_ctx *ctx = threads > 1 ? lb_ctx_create(threads, @NAME@_ISA) : &single;
    if (!arena || !ctx) {
        fprintf(stderr, "error: out of memory (or no threads) for a batch of %lld\n",
                (long long)batch);
        return 1;
    }
    int status = @name@_run(ctx, weights, arena, batch, in_ptrs, out_ptrs);
    if (ctx != &single) lb_ctx_destroy(ctx);
    if (status != LB_OK) {
        if (status > 0)
            fprintf(stderr, "error: @name@_run failed: step %d refused the inputs' values "
                            "(an index out of range, say)\n", status);
        else
            fprintf(stderr, "error: @name@_run failed: %s\n", lb_status_text(status));
        return 1;
    }
    for (int i = 0; i < @NAME@_NUM_OUTPUTS; i++)
        if (npy_write(argv[first + @NAME@_NUM_INPUTS + i], &outputs[i])) return 1;
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) free(inputs[i].data);
    for (int i = 0; i < @NAME@_NUM_OUTPUTS; i++) free(outputs[i].data);
    free(arena);
    free(owned);
    return 0;
}
