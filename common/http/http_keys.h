/* http_keys.h - the API keys of the HTTP services (--api-key-file of the
 * coordinator's --http and of strata-embed).
 *
 * The file: one key per line, optionally followed by per-key limits,
 * `KEY [rpm=N] [tpm=N]` (requests and tokens per minute, http_rate.h; 0 or
 * absent: the service's defaults). Blank lines and lines starting with
 * '#' are ignored. A key is 8..ST_HTTP_KEY_MAX printable ASCII characters
 * without spaces; a duplicate key, an unknown or malformed limit is an
 * error naming the line. The file must not be readable or writable by
 * group or others (mode 0600 or stricter), like the cluster key.
 *
 * Only BLAKE2b hashes of the keys are kept. A lookup hashes the presented
 * key and compares it with every stored hash with sodium_memcmp, without
 * stopping at a match, so its time does not depend on which key matched
 * or on how much of a key was right. */
#ifndef ST_HTTP_KEYS_H
#define ST_HTTP_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_HTTP_KEY_MIN 8
#define ST_HTTP_KEY_MAX 256
#define ST_HTTP_KEYS_MAX 100000 /* keys per file */
#define ST_HTTP_KEY_FILE_MAX ((size_t)64 << 20)

/* Per-minute limits; 0 means no limit. */
typedef struct st_http_limits {
    uint32_t rpm; /* requests per minute */
    uint32_t tpm; /* generated tokens per minute */
} st_http_limits;

typedef struct st_http_keys st_http_keys;

/* st_http_keys_parse - the keys of file text[0..len) (name is for
 * messages). ST_EFORMAT naming the line, ST_EINVAL when there is no key,
 * ST_ENOMEM. */
st_err st_http_keys_parse(const char *name, const char *text, size_t len, st_http_keys **out);

/* st_http_keys_load - reads and parses path; ST_EINVAL when the file is
 * readable or writable by group or others (naming its mode), ST_EIO. */
st_err st_http_keys_load(const char *path, st_http_keys **out);

/* st_http_keys_free - NULL is a no-op. */
void st_http_keys_free(st_http_keys *k);

/* st_http_keys_count - the number of keys. */
size_t st_http_keys_count(const st_http_keys *k);

/* st_http_keys_find - the index of key[0..len), or -1; constant time in
 * the presented key's content (see above). */
long st_http_keys_find(const st_http_keys *k, const char *key, size_t len);

/* st_http_keys_limits - key idx's own limits (zeros where the file gave
 * none). */
st_http_limits st_http_keys_limits(const st_http_keys *k, long idx);

/* st_http_keys_limits_over - the limits a request with key idx runs under:
 * the key's own limit where the file gave one, dflt's (the server's
 * --rpm/--tpm) otherwise; one rule for every HTTP server. */
st_http_limits st_http_keys_limits_over(const st_http_keys *k, long idx, st_http_limits dflt);

#endif
