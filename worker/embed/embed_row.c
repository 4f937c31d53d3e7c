/* embed_row.c - the one URL of an embedding row (see embed_row.h). */
#include "worker/embed/embed_row.h"

#include <string.h>

#define ER_DECIMAL 10u

st_err st_embed_row_target(const char *target, uint64_t *id)
{
    const size_t pl = strlen(ST_EMBED_ROW_PREFIX);
    if (target == NULL || strncmp(target, ST_EMBED_ROW_PREFIX, pl) != 0)
        return st_errorf(ST_EINVAL, "not a row URL: it must start with %s", ST_EMBED_ROW_PREFIX);
    const char *d = target + pl;
    size_t nd = strspn(d, "0123456789");
    if (nd == 0 || d[nd] != '\0' || (d[0] == '0' && nd > 1))
        return st_errorf(ST_EINVAL,
                         "a row's one URL is %sN, N in decimal digits without a leading "
                         "zero, sign, percent-escape, trailing slash or query",
                         ST_EMBED_ROW_PREFIX);
    if (nd > ST_EMBED_ROW_DIGITS_MAX)
        return st_errorf(ST_ERANGE, "an id of %zu digits is past any vocabulary", nd);
    uint64_t v = 0;
    for (size_t i = 0; i < nd; i++)
        v = v * ER_DECIMAL + (uint64_t)(d[i] - '0');
    *id = v;
    return ST_OK;
}
