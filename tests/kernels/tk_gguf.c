/* tk_gguf.c - the minimal GGUF reader of the kernel tests (see tk_gguf.h).
 * Every read is bounds-checked against the file length; metadata values
 * are skipped except general.alignment, which places the data section. */
#include "tests/kernels/tk_gguf.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const unsigned char *tk_rd(tk_gguf *g, size_t n)
{
    if (!g->ok || n > g->len - g->pos) {
        g->ok = 0;
        return NULL;
    }
    const unsigned char *p = g->buf + g->pos;
    g->pos += n;
    return p;
}

static uint64_t tk_rd_u(tk_gguf *g, size_t n)
{
    const unsigned char *p = tk_rd(g, n);
    uint64_t v = 0;
    for (size_t i = 0; p != NULL && i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void tk_skip_value(tk_gguf *g, uint32_t type, int depth)
{
    static const size_t sizes[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        tk_rd(g, tk_rd_u(g, 8));
    } else if (type == 9 && depth < 2) {
        const uint32_t et = (uint32_t)tk_rd_u(g, 4);
        const uint64_t n = tk_rd_u(g, 8);
        for (uint64_t i = 0; i < n && g->ok; i++)
            tk_skip_value(g, et, depth + 1);
    } else if (type < 13 && sizes[type] != 0) {
        tk_rd(g, sizes[type]);
    } else {
        g->ok = 0;
    }
}

void tk_gguf_load(tk_gguf *g, const char *file)
{
    char path[1024];
    const char *shared = getenv("STRATA_SHARED");
    snprintf(path, sizeof path, "%s/models/%s", shared ? shared : "../shared", file);
    memset(g, 0, sizeof *g);
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "cannot open %s", path);
    fseek(fp, 0, SEEK_END);
    const long flen = ftell(fp);
    ck_assert_msg(flen > 0, "%s: cannot size", path);
    g->len = (size_t)flen;
    fseek(fp, 0, SEEK_SET);
    g->buf = malloc(g->len ? g->len : 1);
    ck_assert_ptr_nonnull(g->buf);
    ck_assert_uint_eq(fread(g->buf, 1, g->len, fp), g->len);
    fclose(fp);
    g->ok = 1;
    const unsigned char *magic = tk_rd(g, 4);
    ck_assert(magic != NULL && memcmp(magic, "GGUF", 4) == 0);
    ck_assert_uint_eq(tk_rd_u(g, 4), 3);
    g->nt = tk_rd_u(g, 8);
    const uint64_t nkv = tk_rd_u(g, 8);
    ck_assert(g->nt > 0 && g->nt < 10000);
    uint64_t align = 32;
    for (uint64_t k = 0; k < nkv && g->ok; k++) {
        const uint64_t kl = tk_rd_u(g, 8);
        const unsigned char *key = tk_rd(g, kl);
        const uint32_t type = (uint32_t)tk_rd_u(g, 4);
        if (key && kl == 17 && memcmp(key, "general.alignment", 17) == 0 && type == 4)
            align = tk_rd_u(g, 4);
        else
            tk_skip_value(g, type, 0);
    }
    g->t = calloc(g->nt, sizeof(tk_tensor));
    ck_assert_ptr_nonnull(g->t);
    for (uint64_t i = 0; i < g->nt && g->ok; i++) {
        tk_tensor *t = &g->t[i];
        const uint64_t nl = tk_rd_u(g, 8);
        const unsigned char *name = tk_rd(g, nl);
        ck_assert(name != NULL && nl < sizeof t->name);
        memcpy(t->name, name, nl);
        const uint32_t nd = (uint32_t)tk_rd_u(g, 4);
        ck_assert(nd >= 1 && nd <= 4);
        t->nelem = 1;
        for (uint32_t d = 0; d < nd; d++) {
            const int64_t ne = (int64_t)tk_rd_u(g, 8);
            if (d == 0)
                t->ne0 = ne;
            t->nelem *= ne;
        }
        t->type = (uint32_t)tk_rd_u(g, 4);
        t->off = tk_rd_u(g, 8);
    }
    ck_assert_msg(g->ok, "%s: truncated header", path);
    g->data = g->buf + (g->pos + align - 1) / align * align;
}

const tk_tensor *tk_gguf_find(const tk_gguf *g, const char *name)
{
    for (uint64_t i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0)
            return &g->t[i];
    return NULL;
}
