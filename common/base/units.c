/* units.c - the byte-count grammar (see units.h).
 *
 * The number is read exactly, in integers: the integer part and the
 * decimals separately, each times the unit, the decimals' share divided by
 * their power of ten only when it divides (else the count is not a whole
 * number of bytes). A double would round "1.1T" to some neighbour and
 * call it exact. */
#include "common/base/units.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Decimals read at most: 10^18 - 1 times the largest unit (2^40) fits in
 * 128 bits with room to spare. */
#define UNITS_MAX_DECIMALS 18
#define UNITS_DECIMAL_BASE 10u
#define UNITS_SHOWN 40 /* characters of the input quoted in an error */

typedef unsigned __int128 units_u128;

/* The binary units, in order of their exponent (k = 2^10, M = 2^20, ...). */
static const char units_letters[] = "kmgt";
#define UNITS_SHIFT_PER_LETTER 10u

/* units_digits - reads a run of decimal digits at *p into *v (refusing
 * more than max_digits when max_digits > 0, and any value over 64 bits);
 * *n receives the count of digits. */
static bool units_digits(const char **p, units_u128 *v, int *n, int max_digits)
{
    *v = 0;
    *n = 0;
    for (; isdigit((unsigned char)**p); (*p)++, (*n)++) {
        if (max_digits > 0 && *n >= max_digits)
            return false;
        *v = *v * UNITS_DECIMAL_BASE + (units_u128)(**p - '0');
        if (*v > UINT64_MAX)
            return false;
    }
    return true;
}

/* units_suffix - the shift of the unit at u ("", "B", "k", "kiB", ...);
 * ST_EINVAL naming s otherwise. */
static st_err units_suffix(const char *s, const char *u, unsigned *shift)
{
    *shift = 0;
    if (*u == '\0' || ((*u == 'b' || *u == 'B') && u[1] == '\0'))
        return ST_OK;
    const char *letter = strchr(units_letters, tolower((unsigned char)*u));
    if (letter != NULL) {
        const char *rest = u + 1;
        if (*rest == '\0' || (tolower((unsigned char)rest[0]) == 'i' &&
                              tolower((unsigned char)rest[1]) == 'b' && rest[2] == '\0')) {
            *shift = UNITS_SHIFT_PER_LETTER * (unsigned)(letter - units_letters + 1);
            return ST_OK;
        }
        if ((*rest == 'b' || *rest == 'B') && rest[1] == '\0')
            return st_errorf(ST_EINVAL,
                             "'%.*s' is not a byte count: '%.2s' is ambiguous (a "
                             "power of ten or of two); write '%c' or '%ciB' for the binary unit",
                             UNITS_SHOWN, s, u, toupper((unsigned char)*u),
                             toupper((unsigned char)*u));
    }
    return st_errorf(ST_EINVAL,
                     "'%.*s' is not a byte count: '%.*s' is not a unit (k, M, G, T, "
                     "optionally followed by iB; or B)",
                     UNITS_SHOWN, s, UNITS_SHOWN, u);
}

st_err st_parse_bytes(const char *s, uint64_t *out)
{
    if (s == NULL || !isdigit((unsigned char)s[0]))
        return st_errorf(ST_EINVAL,
                         "'%.*s' is not a byte count: it must start with a digit "
                         "(like 4096, 512M, 1.5G or 16GiB)",
                         UNITS_SHOWN, s ? s : "");
    const char *p = s;
    units_u128 whole, frac = 0;
    int n_whole, n_frac = 0;
    if (!units_digits(&p, &whole, &n_whole, 0))
        return st_errorf(ST_EINVAL, "byte count '%.*s' overflows 64 bits", UNITS_SHOWN, s);
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return st_errorf(ST_EINVAL,
                             "'%.*s' is not a byte count: no digit after the "
                             "decimal point",
                             UNITS_SHOWN, s);
        if (!units_digits(&p, &frac, &n_frac, UNITS_MAX_DECIMALS))
            return st_errorf(ST_EINVAL, "'%.*s' is not a byte count: more than %d decimals",
                             UNITS_SHOWN, s, UNITS_MAX_DECIMALS);
    }
    unsigned shift;
    st_err e = units_suffix(s, p, &shift);
    if (e != ST_OK)
        return e;
    units_u128 pow10 = 1;
    for (int i = 0; i < n_frac; i++)
        pow10 *= UNITS_DECIMAL_BASE;
    const units_u128 frac_bytes = frac << shift;
    if (frac_bytes % pow10 != 0)
        return st_errorf(ST_EINVAL, "'%.*s' is not a whole number of bytes", UNITS_SHOWN, s);
    /* whole < 2^64 and shift <= 40: the shifted value fits 128 bits */
    const units_u128 total = (whole << shift) + frac_bytes / pow10;
    if (total > UINT64_MAX)
        return st_errorf(ST_EINVAL, "byte count '%.*s' overflows 64 bits", UNITS_SHOWN, s);
    *out = (uint64_t)total;
    return ST_OK;
}

/* ---- printing ---------------------------------------------------------- */

#define UNITS_KIB (1ull << 10)
#define UNITS_MIB (1ull << 20)
#define UNITS_GIB (1ull << 30)

const char *st_fmt_bytes(uint64_t b, char *buf, size_t cap)
{
    if (b >= UNITS_GIB)
        snprintf(buf, cap, "%.2f GiB", (double)b / UNITS_GIB);
    else if (b >= UNITS_MIB)
        snprintf(buf, cap, "%.1f MiB", (double)b / UNITS_MIB);
    else if (b >= UNITS_KIB)
        snprintf(buf, cap, "%.1f KiB", (double)b / UNITS_KIB);
    else
        snprintf(buf, cap, "%" PRIu64 " B", b);
    return buf;
}

const char *st_fmt_bytes_exact(uint64_t b, char *buf, size_t cap)
{
    if (b == UINT64_MAX)
        snprintf(buf, cap, "more than 16 EiB");
    else if (b >= UNITS_GIB)
        snprintf(buf, cap, "%.2f GiB (%llu B)", (double)b / UNITS_GIB, (unsigned long long)b);
    else if (b >= UNITS_MIB)
        snprintf(buf, cap, "%.2f MiB (%llu B)", (double)b / UNITS_MIB, (unsigned long long)b);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
    return buf;
}
