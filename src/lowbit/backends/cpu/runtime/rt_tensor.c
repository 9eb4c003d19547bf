/* Elementwise ops with broadcasting, Where, Cast and the gathers, on float32/float64/int64/
 * int32/8-bit/bool values: small, general kernels for the float and index parts of a graph
 * (embeddings, attention masks, shape arithmetic). Float results are single IEEE operations,
 * so any order of evaluation gives the reference's bits. */
#include "rt_tf_internal.h"

/* ---- elementwise -------------------------------------------------------------------------- */

#define LB_EW_CASES(T, A, B, OUT, N, SA, SB)                                                 \
    switch (op) {                                                                            \
    case LB_EW_ADD:                                                                          \
        for (int64_t i = 0; i < N; i++) ((T *)OUT)[i] = (T)(A[i * SA] + B[i * SB]);          \
        break;                                                                               \
    case LB_EW_SUB:                                                                          \
        for (int64_t i = 0; i < N; i++) ((T *)OUT)[i] = (T)(A[i * SA] - B[i * SB]);          \
        break;                                                                               \
    case LB_EW_MUL:                                                                          \
        for (int64_t i = 0; i < N; i++) ((T *)OUT)[i] = (T)(A[i * SA] * B[i * SB]);          \
        break;                                                                               \
    case LB_EW_MAX:                                                                          \
        for (int64_t i = 0; i < N; i++) {                                                    \
            T u_ = A[i * SA], v_ = B[i * SB];                                                  \
            ((T *)OUT)[i] = (u_ != u_ || u_ > v_) ? u_ : v_;                                       \
        }                                                                                    \
        break;                                                                               \
    case LB_EW_MIN:                                                                          \
        for (int64_t i = 0; i < N; i++) {                                                    \
            T u_ = A[i * SA], v_ = B[i * SB];                                                  \
            ((T *)OUT)[i] = (u_ != u_ || u_ < v_) ? u_ : v_;                                       \
        }                                                                                    \
        break;                                                                               \
    case LB_EW_EQ:                                                                           \
        for (int64_t i = 0; i < N; i++) ((uint8_t *)OUT)[i] = A[i * SA] == B[i * SB];        \
        break;                                                                               \
    case LB_EW_LT:                                                                           \
        for (int64_t i = 0; i < N; i++) ((uint8_t *)OUT)[i] = A[i * SA] < B[i * SB];         \
        break;                                                                               \
    case LB_EW_LE:                                                                           \
        for (int64_t i = 0; i < N; i++) ((uint8_t *)OUT)[i] = A[i * SA] <= B[i * SB];        \
        break;                                                                               \
    case LB_EW_GT:                                                                           \
        for (int64_t i = 0; i < N; i++) ((uint8_t *)OUT)[i] = A[i * SA] > B[i * SB];         \
        break;                                                                               \
    case LB_EW_GE:                                                                           \
        for (int64_t i = 0; i < N; i++) ((uint8_t *)OUT)[i] = A[i * SA] >= B[i * SB];        \
        break;                                                                               \
    default:                                                                                 \
        break;                                                                               \
    }

typedef struct lb_ew_job {
    int32_t op, type;
    const lb_iter *it;
    const void *a, *b, *c;
    void *out;
    int64_t inner, rows;
    int status;
} lb_ew_job;

static int lb_esize(int32_t type) {
    switch (type) {
    case LB_F32:
    case LB_I32:
        return 4;
    case LB_F64:
    case LB_I64:
        return 8;
    case LB_I16:
    case LB_U16:
        return 2;
    default:
        return 1;
    }
}

/* One innermost run of n outputs: operands at a + i*sa (elements). */
static int lb_ew_run(int32_t op, int32_t type, const void *a, int64_t sa, const void *b,
                     int64_t sb, const void *c, int64_t sc, void *out, int64_t n) {
    if (op == LB_EW_WHERE) {
        const uint8_t *cond = (const uint8_t *)a;
        int es = lb_esize(type);
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)out + i * es,
                   cond[i * sa] ? (const char *)b + i * sb * es : (const char *)c + i * sc * es,
                   (size_t)es);
        return 0;
    }
    switch (type) {
    case LB_F32: {
        const float *x = (const float *)a, *y = (const float *)b;
        if (op == LB_EW_DIV) {
            for (int64_t i = 0; i < n; i++) ((float *)out)[i] = x[i * sa] / y[i * sb];
            return 0;
        }
        if (sa == 1 && sb == 1) {
            LB_EW_CASES(float, x, y, out, n, 1, 1)
        } else if (sa == 1 && sb == 0) {
            LB_EW_CASES(float, x, y, out, n, 1, 0)
        } else {
            LB_EW_CASES(float, x, y, out, n, sa, sb)
        }
        return 0;
    }
    case LB_F64: {
        const double *x = (const double *)a, *y = (const double *)b;
        if (op == LB_EW_DIV) {
            for (int64_t i = 0; i < n; i++) ((double *)out)[i] = x[i * sa] / y[i * sb];
            return 0;
        }
        LB_EW_CASES(double, x, y, out, n, sa, sb)
        return 0;
    }
    case LB_I64: {
        const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
        if (op == LB_EW_DIV) {
            for (int64_t i = 0; i < n; i++) {
                if (y[i * sb] == 0) return 1;
                ((int64_t *)out)[i] = x[i * sa] / y[i * sb];
            }
            return 0;
        }
        LB_EW_CASES(int64_t, x, y, out, n, sa, sb)
        return 0;
    }
    case LB_I32: {
        const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
        if (op == LB_EW_DIV) {
            for (int64_t i = 0; i < n; i++) {
                if (y[i * sb] == 0) return 1;
                ((int32_t *)out)[i] = x[i * sa] / y[i * sb];
            }
            return 0;
        }
        LB_EW_CASES(int32_t, x, y, out, n, sa, sb)
        return 0;
    }
    default: { /* bool and 8-bit */
        const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
        for (int64_t i = 0; i < n; i++) {
            uint8_t u = x[i * sa], v = y[i * sb];
            uint8_t r = 0;
            switch (op) {
            case LB_EW_AND: r = (uint8_t)(u && v); break;
            case LB_EW_OR: r = (uint8_t)(u || v); break;
            case LB_EW_XOR: r = (uint8_t)((u != 0) != (v != 0)); break;
            case LB_EW_EQ: r = u == v; break;
            case LB_EW_MAX: r = u > v ? u : v; break;
            case LB_EW_MIN: r = u < v ? u : v; break;
            default: {
                int32_t p = type == LB_I8 ? (int8_t)u : u, q = type == LB_I8 ? (int8_t)v : v;
                switch (op) {
                case LB_EW_LT: r = p < q; break;
                case LB_EW_LE: r = p <= q; break;
                case LB_EW_GT: r = p > q; break;
                case LB_EW_GE: r = p >= q; break;
                case LB_EW_ADD: r = (uint8_t)(p + q); break;
                case LB_EW_SUB: r = (uint8_t)(p - q); break;
                case LB_EW_MUL: r = (uint8_t)(p * q); break;
                default: break;
                }
            }
            }
            ((uint8_t *)out)[i] = r;
        }
        return 0;
    }
    }
}

static int lb_out_esize(int32_t op, int32_t type) {
    return (op >= LB_EW_EQ && op <= LB_EW_GE) ? 1 : lb_esize(type);
}

static void lb_ew_task(void *arg, int64_t t, int worker) {
    (void)worker;
    lb_ew_job *j = (lb_ew_job *)arg;
    const lb_iter *it = j->it;
    int nd = it->nd;
    int64_t idx[8] = {0}, rem = t;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
    }
    int64_t oa = 0, ob = 0, oc = 0;
    for (int d = 0; d < nd - 1; d++) {
        oa += idx[d] * it->s[0][d];
        ob += idx[d] * it->s[1][d];
        oc += idx[d] * it->s[2][d];
    }
    int ea = j->op == LB_EW_WHERE ? 1 : lb_esize(j->type), eb = lb_esize(j->type);
    int eo = lb_out_esize(j->op, j->type);
    int64_t last = nd - 1;
    int st = lb_ew_run(j->op, j->type, (const char *)j->a + oa * ea, it->s[0][last],
                       (const char *)j->b + ob * eb, it->s[1][last],
                       j->c ? (const char *)j->c + oc * eb : NULL, it->s[2][last],
                       (char *)j->out + t * j->inner * eo, j->inner);
    if (st) j->status = st;
}

int lb_elementwise(const lb_ctx *ctx, int32_t op, int32_t type, const lb_iter *it,
                   const void *a, const void *b, const void *c, void *out) {
    if (it->nd <= 0) { /* a scalar */
        lb_iter one = {1, {1}, {{0}, {0}, {0}}};
        return lb_elementwise(ctx, op, type, &one, a, b, c, out);
    }
    int64_t rows = 1;
    for (int d = 0; d < it->nd - 1; d++) rows *= it->shape[d];
    int64_t inner = it->shape[it->nd - 1];
    if (rows <= 0 || inner <= 0) return 0;
    lb_ew_job j = {op, type, it, a, b, c, out, inner, rows, 0};
    /* one task per row; small rows run in one thread */
    if (rows * inner < 65536) {
        for (int64_t t = 0; t < rows; t++) lb_ew_task(&j, t, 0);
    } else {
        lb_parallel_for(ctx, rows, lb_ew_task, &j);
    }
    return j.status;
}

/* ---- cast --------------------------------------------------------------------------------- */

static inline double lb_get(const void *x, int32_t type, int64_t i) {
    switch (type) {
    case LB_F32: return ((const float *)x)[i];
    case LB_F64: return ((const double *)x)[i];
    case LB_I64: return (double)((const int64_t *)x)[i];
    case LB_I32: return ((const int32_t *)x)[i];
    case LB_I16: return ((const int16_t *)x)[i];
    case LB_U16: return ((const uint16_t *)x)[i];
    case LB_I8: return ((const int8_t *)x)[i];
    default: return ((const uint8_t *)x)[i];
    }
}

void lb_cast(const lb_ctx *ctx, int64_t n, const void *x, int32_t from, int32_t to, void *y) {
    (void)ctx;
    if (from == LB_I64 && to == LB_I64) {
        memcpy(y, x, (size_t)n * 8);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (from == LB_I64 && to != LB_F32 && to != LB_F64 && to != LB_BOOL) {
            int64_t v = ((const int64_t *)x)[i];
            switch (to) {
            case LB_I32: ((int32_t *)y)[i] = (int32_t)v; break;
            case LB_I16: ((int16_t *)y)[i] = (int16_t)v; break;
            case LB_U16: ((uint16_t *)y)[i] = (uint16_t)v; break;
            case LB_I8: ((int8_t *)y)[i] = (int8_t)v; break;
            default: ((uint8_t *)y)[i] = (uint8_t)v; break;
            }
            continue;
        }
        double v = lb_get(x, from, i);
        switch (to) {
        case LB_F32:
            if (from == LB_I64)
                ((float *)y)[i] = (float)((const int64_t *)x)[i];
            else
                ((float *)y)[i] = (float)v;
            break;
        case LB_F64: ((double *)y)[i] = from == LB_I64 ? (double)((const int64_t *)x)[i] : v; break;
        case LB_BOOL: ((uint8_t *)y)[i] = v != 0; break;
        case LB_I64: ((int64_t *)y)[i] = (int64_t)v; break;
        case LB_I32: ((int32_t *)y)[i] = (int32_t)v; break;
        case LB_I16: ((int16_t *)y)[i] = (int16_t)v; break;
        case LB_U16: ((uint16_t *)y)[i] = (uint16_t)v; break;
        case LB_I8: ((int8_t *)y)[i] = (int8_t)v; break;
        default: ((uint8_t *)y)[i] = (uint8_t)v; break;
        }
    }
}

/* ---- gathers ------------------------------------------------------------------------------ */

static inline int64_t lb_index(const void *idx, int32_t type, int64_t i) {
    return type == LB_I32 ? ((const int32_t *)idx)[i] : ((const int64_t *)idx)[i];
}

typedef struct lb_gather_job {
    int64_t dim, inner, count;
    int32_t esize, index_type;
    const void *data, *indices;
    void *out;
} lb_gather_job;

static void lb_gather_task(void *arg, int64_t o, int worker) {
    (void)worker;
    const lb_gather_job *j = (const lb_gather_job *)arg;
    size_t row = (size_t)(j->inner * j->esize);
    for (int64_t c = 0; c < j->count; c++) {
        int64_t i = lb_index(j->indices, j->index_type, c);
        if (i < 0) i += j->dim;
        memcpy((char *)j->out + (o * j->count + c) * (int64_t)row,
               (const char *)j->data + (o * j->dim + i) * (int64_t)row, row);
    }
}

int64_t lb_gather(const lb_ctx *ctx, int64_t outer, int64_t dim, int64_t inner, int32_t esize,
                  const void *data, int64_t count, const void *indices, int32_t index_type,
                  void *out) {
    for (int64_t c = 0; c < count; c++) {
        int64_t i = lb_index(indices, index_type, c);
        if (i < -dim || i >= dim) return 1 + c;
    }
    lb_gather_job j = {dim, inner, count, esize, index_type, data, indices, out};
    if (outer * count * inner < 65536) {
        for (int64_t o = 0; o < outer; o++) lb_gather_task(&j, o, 0);
    } else {
        lb_parallel_for(ctx, outer, lb_gather_task, &j);
    }
    return 0;
}

int64_t lb_gather_nd(const lb_ctx *ctx, int32_t r, const int64_t *dims, int32_t esize,
                     const void *data, int64_t count, int32_t kq, const int64_t *indices,
                     void *out) {
    (void)ctx;
    int64_t slice = 1;
    for (int32_t d = kq; d < r; d++) slice *= dims[d];
    size_t bytes = (size_t)(slice * esize);
    for (int64_t c = 0; c < count; c++) {
        int64_t off = 0;
        for (int32_t d = 0; d < kq; d++) {
            int64_t i = indices[c * kq + d];
            if (i < 0) i += dims[d];
            if (i < 0 || i >= dims[d]) return 1 + c;
            off = off * dims[d] + i;
        }
        memcpy((char *)out + c * (int64_t)bytes, (const char *)data + off * (int64_t)bytes, bytes);
    }
    return 0;
}
