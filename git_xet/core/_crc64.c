/*
 * CRC-64/NVME for git_xet.core.checksums (upload grants carry it; S3 checks it).
 *
 * crc64nvme(buffer, crc=0) -> int
 *
 * Reflected polynomial 0x9A6C9329AC4BC9B5, initial value and final xor all ones; `crc` is a
 * previous result, so a buffer can be checksummed in pieces. Slicing-by-8 (eight bytes per
 * step through eight tables), GIL released for the loop. Semantics are exactly those of
 * checksums.crc64nvme_reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x9A6C9329AC4BC9B5ULL

static uint64_t TABLES[8][256];

static void build_tables(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t crc = (uint64_t)i;
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ ((crc & 1) ? POLY : 0);
        TABLES[0][i] = crc;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) TABLES[k][i] = (TABLES[k - 1][i] >> 8) ^ TABLES[0][TABLES[k - 1][i] & 0xff];
}

static uint64_t update(uint64_t crc, const unsigned char *p, Py_ssize_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
#if PY_BIG_ENDIAN
        word = __builtin_bswap64(word);
#endif
        crc ^= word;
        crc = TABLES[7][crc & 0xff] ^ TABLES[6][(crc >> 8) & 0xff] ^ TABLES[5][(crc >> 16) & 0xff] ^
              TABLES[4][(crc >> 24) & 0xff] ^ TABLES[3][(crc >> 32) & 0xff] ^ TABLES[2][(crc >> 40) & 0xff] ^
              TABLES[1][(crc >> 48) & 0xff] ^ TABLES[0][crc >> 56];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) crc = (crc >> 8) ^ TABLES[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

static PyObject *py_crc64nvme(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long long crc = 0;
    if (!PyArg_ParseTuple(args, "y*|K", &view, &crc)) return NULL;
    uint64_t out;
    if (view.len >= 65536) {
        Py_BEGIN_ALLOW_THREADS
        out = update(crc, view.buf, view.len);
        Py_END_ALLOW_THREADS
    } else {
        out = update(crc, view.buf, view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(out);
}

static PyMethodDef methods[] = {
    {"crc64nvme", py_crc64nvme, METH_VARARGS, "crc64nvme(buffer, crc=0) -> int"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crc64", "CRC-64/NVME (C).", -1, methods};

PyMODINIT_FUNC PyInit__crc64(void) {
    build_tables();
    return PyModule_Create(&module);
}
