/* tk_gguf.h - a minimal GGUF v3 reader for the kernel tests: just the
 * tensor table (name, ggml type, element counts, data offset), enough to
 * compare our converters' bytes with files written by llama.cpp. Failures
 * are Check assertions. Test code only. */
#ifndef ST_TESTS_TK_GGUF_H
#define ST_TESTS_TK_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct tk_tensor {
    char name[128];
    uint32_t type;
    int64_t nelem, ne0;
    uint64_t off;
} tk_tensor;

typedef struct tk_gguf {
    unsigned char *buf;
    size_t len, pos;
    int ok;
    tk_tensor *t;
    uint64_t nt;
    const unsigned char *data;
} tk_gguf;

/* tk_gguf_load - reads $STRATA_SHARED/models/<file> whole and parses its
 * header; asserts (Check) on any malformed or truncated field. Free g->buf
 * and g->t when done. */
void tk_gguf_load(tk_gguf *g, const char *file);

/* tk_gguf_find - the tensor called name, or NULL. */
const tk_tensor *tk_gguf_find(const tk_gguf *g, const char *name);

#endif
