/* hex.c - bytes as hex (see hex.h). */
#include "common/base/hex.h"

#define HEX_DIGITS_PER_BYTE 2
#define HEX_NIBBLE_BITS 4
#define HEX_NIBBLE_MASK 0xfu

st_err st_hex(const uint8_t *p, size_t n, char *out, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    if (cap == 0 || n > (cap - 1) / HEX_DIGITS_PER_BYTE) {
        if (cap > 0)
            out[0] = '\0';
        return st_errorf(ST_ERANGE, "hex of %zu bytes needs %zu bytes of buffer; %zu given", n,
                         n * HEX_DIGITS_PER_BYTE + 1, cap);
    }
    for (size_t i = 0; i < n; i++) {
        out[HEX_DIGITS_PER_BYTE * i] = digits[p[i] >> HEX_NIBBLE_BITS];
        out[HEX_DIGITS_PER_BYTE * i + 1] = digits[p[i] & HEX_NIBBLE_MASK];
    }
    out[HEX_DIGITS_PER_BYTE * n] = '\0';
    return ST_OK;
}

void st_hex_short(const uint8_t *p, size_t n, char out[ST_HEX_SHORT_CAP])
{
    /* cannot fail: at most ST_HEX_SHORT bytes into ST_HEX_SHORT_CAP */
    (void)st_hex(p, n < ST_HEX_SHORT ? n : ST_HEX_SHORT, out, ST_HEX_SHORT_CAP);
}
