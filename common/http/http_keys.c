/* http_keys.c - API keys of the HTTP gateway (see http_keys.h). */
#include "common/http/http_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEYS_HASH 32 /* crypto_generichash_BYTES */
#define KEYS_GROUP_OTHER_BITS 077u
#define KEYS_PRINT_LO 0x21
#define KEYS_PRINT_HI 0x7e

typedef struct keys_entry {
    uint8_t hash[KEYS_HASH];
    st_http_limits lim;
} keys_entry;

struct st_http_keys {
    keys_entry *v;
    size_t n, cap;
};

static void keys_hash(const char *key, size_t len, uint8_t out[KEYS_HASH])
{
    crypto_generichash(out, KEYS_HASH, (const uint8_t *)key, len, NULL, 0);
}

/* keys_limit - "rpm=N" or "tpm=N" of word w[0..n) into lim. */
static bool keys_limit(const char *w, size_t n, st_http_limits *lim)
{
    uint32_t *dst;
    if (n > 4 && memcmp(w, "rpm=", 4) == 0)
        dst = &lim->rpm;
    else if (n > 4 && memcmp(w, "tpm=", 4) == 0)
        dst = &lim->tpm;
    else
        return false;
    uint64_t v = 0;
    for (size_t i = 4; i < n; i++) {
        if (w[i] < '0' || w[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(w[i] - '0');
        if (v > UINT32_MAX)
            return false;
    }
    *dst = (uint32_t)v;
    return true;
}

static bool keys_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* keys_line - one line (without its '\n'); *k gets the key word. */
static st_err keys_line(const char *name, size_t lineno, const char *s, size_t n, st_http_keys *k)
{
    size_t i = 0;
    while (i < n && keys_space(s[i]))
        i++;
    if (i == n || s[i] == '#')
        return ST_OK;
    size_t k0 = i;
    while (i < n && !keys_space(s[i]))
        i++;
    size_t klen = i - k0;
    if (klen < ST_HTTP_KEY_MIN || klen > ST_HTTP_KEY_MAX)
        return st_errorf(ST_EFORMAT, "%s:%zu: a key of %zu characters; %d..%d are accepted", name,
                         lineno, klen, ST_HTTP_KEY_MIN, ST_HTTP_KEY_MAX);
    for (size_t j = k0; j < i; j++)
        if ((unsigned char)s[j] < KEYS_PRINT_LO || (unsigned char)s[j] > KEYS_PRINT_HI)
            return st_errorf(ST_EFORMAT, "%s:%zu: a key may hold printable ASCII only", name,
                             lineno);
    keys_entry e = {.lim = {0, 0}};
    keys_hash(s + k0, klen, e.hash);
    for (;;) {
        while (i < n && keys_space(s[i]))
            i++;
        if (i == n)
            break;
        size_t w0 = i;
        while (i < n && !keys_space(s[i]))
            i++;
        if (!keys_limit(s + w0, i - w0, &e.lim))
            return st_errorf(ST_EFORMAT, "%s:%zu: '%.*s' is not rpm=N or tpm=N", name, lineno,
                             (int)(i - w0 > 40 ? 40 : i - w0), s + w0);
    }
    for (size_t j = 0; j < k->n; j++)
        if (sodium_memcmp(k->v[j].hash, e.hash, KEYS_HASH) == 0)
            return st_errorf(ST_EFORMAT, "%s:%zu: a duplicate key", name, lineno);
    if (k->n == ST_HTTP_KEYS_MAX)
        return st_errorf(ST_EFORMAT, "%s:%zu: more than %d keys", name, lineno, ST_HTTP_KEYS_MAX);
    if (k->n == k->cap) {
        size_t c = k->cap ? k->cap * 2 : 16;
        keys_entry *v = realloc(k->v, c * sizeof *v);
        if (v == NULL)
            return st_errorf(ST_ENOMEM, "%s: %zu keys", name, c);
        k->v = v;
        k->cap = c;
    }
    k->v[k->n++] = e;
    return ST_OK;
}

st_err st_http_keys_parse(const char *name, const char *text, size_t len, st_http_keys **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return st_err_sodium("sodium_init");
    st_http_keys *k = calloc(1, sizeof *k);
    if (k == NULL)
        return st_errorf(ST_ENOMEM, "keys");
    size_t lineno = 1, at = 0;
    st_err e = ST_OK;
    while (at < len && e == ST_OK) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        e = keys_line(name, lineno++, text + at, end - at, k);
        at = end + 1;
    }
    if (e == ST_OK && k->n == 0)
        e = st_errorf(ST_EINVAL, "%s holds no key", name);
    if (e != ST_OK) {
        st_http_keys_free(k);
        return e;
    }
    *out = k;
    return ST_OK;
}

st_err st_http_keys_load(const char *path, st_http_keys **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return st_err_errno(errno, path);
    struct stat sb;
    st_err e = ST_OK;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0) {
        e = st_err_errno(errno, path);
    } else if (!S_ISREG(sb.st_mode)) {
        e = st_errorf(ST_EINVAL, "%s is not a regular file", path);
    } else if (sb.st_mode & KEYS_GROUP_OTHER_BITS) {
        e = st_errorf(ST_EINVAL,
                      "%s has mode %03o: API keys must not be readable or writable "
                      "by group or others (chmod 600 %s)",
                      path, (unsigned)(sb.st_mode & 0777u), path);
    } else if ((size_t)sb.st_size > ST_HTTP_KEY_FILE_MAX) {
        e = st_errorf(ST_ERANGE, "%s has %lld bytes; at most %zu", path, (long long)sb.st_size,
                      ST_HTTP_KEY_FILE_MAX);
    } else if ((buf = malloc((size_t)sb.st_size + 1)) == NULL) {
        e = st_errorf(ST_ENOMEM, "%s", path);
    } else {
        size_t got = 0;
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                e = r < 0 ? st_err_errno(errno, path) : st_errorf(ST_EIO, "%s shrank", path);
                break;
            }
            got += (size_t)r;
        }
        if (e == ST_OK)
            e = st_http_keys_parse(path, buf, got, out);
        sodium_memzero(buf, (size_t)sb.st_size);
    }
    free(buf);
    close(fd);
    return e;
}

void st_http_keys_free(st_http_keys *k)
{
    if (k == NULL)
        return;
    if (k->v)
        sodium_memzero(k->v, k->cap * sizeof *k->v);
    free(k->v);
    free(k);
}

size_t st_http_keys_count(const st_http_keys *k) { return k->n; }

long st_http_keys_find(const st_http_keys *k, const char *key, size_t len)
{
    uint8_t h[KEYS_HASH];
    keys_hash(key, len, h);
    long found = -1;
    for (size_t i = 0; i < k->n; i++) {
        /* every entry is compared; the select below has no branch on the result */
        long hit = sodium_memcmp(k->v[i].hash, h, KEYS_HASH) == 0;
        found = (found & (hit - 1)) | ((long)i & -hit);
    }
    sodium_memzero(h, sizeof h);
    return found;
}

st_http_limits st_http_keys_limits(const st_http_keys *k, long idx)
{
    st_http_limits none = {0, 0};
    return idx >= 0 && (size_t)idx < k->n ? k->v[idx].lim : none;
}

st_http_limits st_http_keys_limits_over(const st_http_keys *k, long idx, st_http_limits dflt)
{
    st_http_limits own = st_http_keys_limits(k, idx);
    if (own.rpm)
        dflt.rpm = own.rpm;
    if (own.tpm)
        dflt.tpm = own.tpm;
    return dflt;
}
