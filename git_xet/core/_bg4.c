/*
 * The counting half of the BG4 predictor for git_xet.core.compression.
 *
 * lane_popcount_histograms(buffer) -> tuple of 36 ints
 *
 * For each lane k = i % 4 of the buffer, how many of its bytes have popcount 0..8: entry
 * 9 * k + p. Exactly compression.lane_popcount_histograms_reference, in one pass instead of
 * one translate and nine counts per lane (the predictor runs on a whole chunk every 32
 * chunks, and that counting was most of its cost). The divergence that decides stays in
 * Python: it is 36 numbers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Set bits of a byte (plain C: gcc, clang and MSVC alike; run 1024 times per call). */
static int popcount8(unsigned v) {
    int bits = 0;
    for (; v; v &= v - 1) bits++;
    return bits;
}

static PyObject *py_histograms(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    /* Count byte values per lane first (a plain increment), popcounts afterwards. */
    Py_ssize_t counts[4][256] = {{0}};
    const uint8_t *p = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, i = 0;
    for (; i + 4 <= n; i += 4) {
        counts[0][p[i]]++;
        counts[1][p[i + 1]]++;
        counts[2][p[i + 2]]++;
        counts[3][p[i + 3]]++;
    }
    for (; i < n; i++) counts[i & 3][p[i]]++;
    PyBuffer_Release(&view);
    Py_ssize_t hist[36] = {0};
    for (int lane = 0; lane < 4; lane++)
        for (int v = 0; v < 256; v++) hist[9 * lane + popcount8((unsigned)v)] += counts[lane][v];
    PyObject *out = PyTuple_New(36);
    if (!out) return NULL;
    for (int k = 0; k < 36; k++) {
        PyObject *v = PyLong_FromSsize_t(hist[k]);
        if (!v) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, k, v);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"lane_popcount_histograms", py_histograms, METH_VARARGS,
     "lane_popcount_histograms(buffer) -> 36 counts: bytes of lane i % 4 == k with popcount p at 9 * k + p"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bg4", "BG4 predictor histograms (C).", -1, methods};

PyMODINIT_FUNC PyInit__bg4(void) { return PyModule_Create(&module); }
