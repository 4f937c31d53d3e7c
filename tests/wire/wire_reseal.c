/* wire_reseal.c - the CRC-32C tag of a hand-made packet (wire_reseal.h). */
#include "tests/wire/wire_reseal.h"

#include <stdint.h>
#include <string.h>

#include "common/base/le.h"
#include "common/wire/wire.h"
#include "kernels/convert.h"

int wt_reseal(unsigned char *buf, size_t len)
{
    if (buf == NULL || len < ST_WIRE_HDR_SIZE)
        return -1;
    uint64_t n_rows = st_le_ld32(buf + ST_WIRE_OFF_N_ROWS);
    uint64_t off = ST_WIRE_HDR_SIZE + n_rows * ST_WIRE_ROW_SIZE;
    if (off > len)
        return -1;
    const st_convert_ops *ref = st_convert_ref();
    memset(buf + ST_WIRE_OFF_TAG, 0, ST_WIRE_TAG_SIZE);
    uint32_t crc = ref->crc32c(0, buf + off, len - (size_t)off);
    crc = ref->crc32c(crc, buf + ST_WIRE_HDR_SIZE, (size_t)off - ST_WIRE_HDR_SIZE);
    crc = ref->crc32c(crc, buf, ST_WIRE_HDR_SIZE);
    st_le_st32(buf + ST_WIRE_OFF_TAG, crc);
    return 0;
}
