/* Exact nearest / two-nearest-word search with an int8 prefilter: the kernel of textdp.int8_search.
 *
 * The Python side (textdp/int8_search.py) states the mathematics; this file only evaluates it.
 * For every query q and vocabulary word v the kernel computes the integer dot product
 *     acc = sum_i Vu[v][i] * Zq[q][i]      (Vu unsigned bytes, Zq signed bytes)
 * and keeps v as a candidate when  acc + tau[q] >= R[v].  Every candidate's squared Euclidean
 * distance is then computed exactly in double precision from the float32 vectors, and the running
 * best two (distance, then lower id on a tie) are kept.  tau[q] is recomputed from the running
 * k-th best distance (k = 1: nearest only; k = 2: the two nearest) after every improvement, so
 * the filter tightens as the search goes.  The
 * Python side chooses R and tau so that a word is dropped only when k already-verified words are
 * strictly nearer than it (see int8_search.py); the kernel itself never decides on an approximation.
 *
 * Two implementations of the same loop: a portable one (plain C, ~5x slower than BLAS: for tests and
 * for checking) and one with AVX-512 VNNI (vpdpbusd), chosen by the caller after has_vnni().  They
 * give the same result; the VNNI loop tests a tile's 16 words against the threshold of the tile's
 * start, so it may compute a few more exact distances than the portable loop.
 *
 * Layout.  Words are packed in tiles of 16; a tile holds `groups` blocks of 64 bytes, block g holding
 * for word j (0..15) its four bytes of dimensions 4g..4g+3 at offset 4j.  Queries are rows of
 * 4 * groups signed bytes.  The number of queries is a multiple of QGROUP (padding queries have
 * tau = -TAU_CAP, so they never select a word).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define TILE 16
#define QGROUP 8
#define QCHUNK 256
#define VBLOCK 512 /* tiles per pass over the queries: 512 * 64 * groups bytes, in L2 for 50-d */
#define TAU_CAP (1 << 29)

typedef int32_t __attribute__((may_alias)) i32_alias; /* query rows are read four bytes at a time */

typedef struct {
    const uint8_t *packed;
    const int32_t *R;
    const float *vectors;
    Py_ssize_t n, d, groups;
    const int8_t *zq;
    const double *z;
    const double *zz;
    const double *slack;
    const int32_t *shift;
    double W;
    int32_t *tau;
    double *best;
    int64_t *arg;
    int64_t *checked;
    int k; /* 1: the nearest word only (threshold from the best); 2: the two nearest (from the second) */
} State;

static void set_tau(State *s, Py_ssize_t q) {
    double e2 = s->best[2 * q + s->k - 1]; /* the k-th best exact distance so far */
    int32_t t;
    if (!(e2 < INFINITY)) {
        t = TAU_CAP;
    } else {
        double x = floor((e2 - s->zz[q] + s->slack[q]) / s->W) + 1.0 - (double)s->shift[q];
        t = x > TAU_CAP ? TAU_CAP : (x < -TAU_CAP ? -TAU_CAP : (int32_t)x);
    }
    s->tau[q] = t;
}

static void check(State *s, Py_ssize_t q, Py_ssize_t v) {
    const double *z = s->z + q * s->d;
    const float *x = s->vectors + v * s->d;
    double acc = 0.0;
    for (Py_ssize_t i = 0; i < s->d; i++) {
        double t = z[i] - (double)x[i];
        acc += t * t;
    }
    double *b = s->best + 2 * q;
    int64_t *a = s->arg + 2 * q;
    s->checked[q]++;
    if (acc < b[0] || (acc == b[0] && v < a[0])) {
        b[1] = b[0];
        a[1] = a[0];
        b[0] = acc;
        a[0] = v;
    } else if (acc < b[1] || (acc == b[1] && v < a[1])) {
        b[1] = acc;
        a[1] = v;
    } else {
        return;
    }
    set_tau(s, q);
}

/* The blocked scan shared by both kernels: vocabulary blocks (VBLOCK tiles, kept in L2) outside,
 * chunks of QCHUNK queries (kept in L1) inside, one call of `tile` per (tile, query chunk). Every
 * query meets the tiles in id order, so ties resolve to the lower id whatever the kernel. */
typedef void (*tile_fn)(State *s, Py_ssize_t t, Py_ssize_t q0, Py_ssize_t q1);

static void scan(State *s, Py_ssize_t t0, Py_ssize_t t1, Py_ssize_t nq, tile_fn tile) {
    for (Py_ssize_t vb = t0; vb < t1; vb += VBLOCK) {
        Py_ssize_t vend = vb + VBLOCK < t1 ? vb + VBLOCK : t1;
        for (Py_ssize_t qc = 0; qc < nq; qc += QCHUNK) {
            Py_ssize_t qend = qc + QCHUNK < nq ? qc + QCHUNK : nq;
            for (Py_ssize_t t = vb; t < vend; t++) tile(s, t, qc, qend);
        }
    }
}

static void tile_portable(State *s, Py_ssize_t t, Py_ssize_t q0, Py_ssize_t q1) {
    const Py_ssize_t G = s->groups, width = 4 * G;
    const uint8_t *p = s->packed + t * G * 64;
    const int32_t *r = s->R + t * TILE;
    for (Py_ssize_t q = q0; q < q1; q++) {
        const int8_t *zq = s->zq + q * width;
        int32_t acc[TILE];
        for (int j = 0; j < TILE; j++) acc[j] = 0;
        for (Py_ssize_t g = 0; g < G; g++) {
            const uint8_t *blk = p + g * 64;
            const int8_t *zz = zq + 4 * g;
            for (int j = 0; j < TILE; j++) {
                acc[j] += (int32_t)blk[4 * j] * zz[0] + (int32_t)blk[4 * j + 1] * zz[1] +
                          (int32_t)blk[4 * j + 2] * zz[2] + (int32_t)blk[4 * j + 3] * zz[3];
            }
        }
        for (int j = 0; j < TILE; j++) {
            if (acc[j] + s->tau[q] >= r[j]) check(s, q, t * TILE + j);
        }
    }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_VNNI_KERNEL 1

__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void tile_vnni(State *s, Py_ssize_t t, Py_ssize_t q0, Py_ssize_t q1) {
    const Py_ssize_t G = s->groups, width = 4 * G, step = G; /* step: int32 words per query row */
    const uint8_t *p = s->packed + t * G * 64;
    const __m512i r = _mm512_loadu_si512((const void *)(s->R + t * TILE));
    for (Py_ssize_t q = q0; q < q1; q += QGROUP) {
        const i32_alias *z0 = (const i32_alias *)(s->zq + q * width);
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (Py_ssize_t g = 0; g < G; g++) {
            const __m512i v = _mm512_loadu_si512((const void *)(p + g * 64));
            a0 = _mm512_dpbusd_epi32(a0, v, _mm512_set1_epi32(z0[g]));
            a1 = _mm512_dpbusd_epi32(a1, v, _mm512_set1_epi32(z0[step + g]));
            a2 = _mm512_dpbusd_epi32(a2, v, _mm512_set1_epi32(z0[2 * step + g]));
            a3 = _mm512_dpbusd_epi32(a3, v, _mm512_set1_epi32(z0[3 * step + g]));
            a4 = _mm512_dpbusd_epi32(a4, v, _mm512_set1_epi32(z0[4 * step + g]));
            a5 = _mm512_dpbusd_epi32(a5, v, _mm512_set1_epi32(z0[5 * step + g]));
            a6 = _mm512_dpbusd_epi32(a6, v, _mm512_set1_epi32(z0[6 * step + g]));
            a7 = _mm512_dpbusd_epi32(a7, v, _mm512_set1_epi32(z0[7 * step + g]));
        }
        const int32_t *tau = s->tau + q;
        __mmask16 m[QGROUP];
        m[0] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a0, _mm512_set1_epi32(tau[0])), r);
        m[1] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a1, _mm512_set1_epi32(tau[1])), r);
        m[2] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a2, _mm512_set1_epi32(tau[2])), r);
        m[3] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a3, _mm512_set1_epi32(tau[3])), r);
        m[4] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a4, _mm512_set1_epi32(tau[4])), r);
        m[5] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a5, _mm512_set1_epi32(tau[5])), r);
        m[6] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a6, _mm512_set1_epi32(tau[6])), r);
        m[7] = _mm512_cmpge_epi32_mask(_mm512_add_epi32(a7, _mm512_set1_epi32(tau[7])), r);
        if ((m[0] | m[1] | m[2] | m[3] | m[4] | m[5] | m[6] | m[7]) == 0) continue;
        for (int k = 0; k < QGROUP; k++) {
            unsigned bits = m[k];
            while (bits) {
                int j = __builtin_ctz(bits);
                bits &= bits - 1;
                check(s, q + k, t * TILE + j);
            }
        }
    }
}

static int cpu_has_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}
#else
static int cpu_has_vnni(void) { return 0; }
#endif

static int need(Py_buffer *b, Py_ssize_t bytes, const char *name) {
    if (b->len < bytes) {
        PyErr_Format(PyExc_ValueError, "_top2: buffer %s has %zd bytes, needs %zd", name, b->len, bytes);
        return 0;
    }
    return 1;
}

static PyObject *top2(PyObject *self, PyObject *args) {
    Py_buffer packed, R, vectors, zq, z, zz, slack, shift, tau, best, arg, checked;
    double W;
    Py_ssize_t n, d, groups, nq, t0, t1;
    int kernel, k;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*dw*w*w*w*nnnnnnii", &packed, &R, &vectors, &zq, &z, &zz, &slack,
                          &shift, &W, &tau, &best, &arg, &checked, &n, &d, &groups, &nq, &t0, &t1, &kernel, &k))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t tiles = (n + TILE - 1) / TILE;
    if (nq % QGROUP != 0 || t0 < 0 || t1 > tiles || t0 > t1 || 4 * groups < d || !(W > 0.0) || (k != 1 && k != 2)) {
        PyErr_SetString(PyExc_ValueError, "_top2: inconsistent shapes or scale");
        goto done;
    }
    if (!need(&packed, tiles * groups * 64, "packed") || !need(&R, tiles * TILE * 4, "R") ||
        !need(&vectors, n * d * 4, "vectors") || !need(&zq, nq * 4 * groups, "zq") || !need(&z, nq * d * 8, "z") ||
        !need(&zz, nq * 8, "zz") || !need(&slack, nq * 8, "slack") || !need(&shift, nq * 4, "shift") ||
        !need(&tau, nq * 4, "tau") || !need(&best, nq * 16, "best") || !need(&arg, nq * 16, "arg") ||
        !need(&checked, nq * 8, "checked"))
        goto done;
    if (kernel == 1 && !cpu_has_vnni()) {
        PyErr_SetString(PyExc_RuntimeError, "_top2: this CPU has no AVX-512 VNNI");
        goto done;
    }
    State s = {packed.buf, R.buf, vectors.buf, n, d, groups, zq.buf, z.buf, zz.buf, slack.buf, shift.buf,
               W, tau.buf, best.buf, arg.buf, checked.buf, k};
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_VNNI_KERNEL
    scan(&s, t0, t1, nq, kernel == 1 ? tile_vnni : tile_portable);
#else
    scan(&s, t0, t1, nq, tile_portable);
#endif
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&packed); PyBuffer_Release(&R); PyBuffer_Release(&vectors); PyBuffer_Release(&zq);
    PyBuffer_Release(&z); PyBuffer_Release(&zz); PyBuffer_Release(&slack); PyBuffer_Release(&shift);
    PyBuffer_Release(&tau); PyBuffer_Release(&best); PyBuffer_Release(&arg); PyBuffer_Release(&checked);
    return result;
}

static PyObject *has_vnni(PyObject *self, PyObject *noargs) { return PyBool_FromLong(cpu_has_vnni()); }

static PyMethodDef methods[] = {
    {"top2", top2, METH_VARARGS, "Run the nearest (k=1) or two-nearest (k=2) search over tiles [t0, t1) (see textdp/int8_search.py)."},
    {"has_vnni", has_vnni, METH_NOARGS, "Whether this CPU runs the AVX-512 VNNI kernel."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_top2", NULL, -1, methods};

PyMODINIT_FUNC PyInit__top2(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "TILE", TILE) < 0 || PyModule_AddIntConstant(m, "QGROUP", QGROUP) < 0 ||
        PyModule_AddIntConstant(m, "TAU_CAP", TAU_CAP) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
