/* le.h - little-endian integers in byte buffers: the one home of the loads
 * and stores every fixed-layout format of Strata uses (the wire packet
 * header, the envelope header, the STEP frame's meta length, the
 * tokenizer's binary tables).
 *
 * Contract: p points to at least 2, 4 or 8 readable (loads) or writable
 * (stores) bytes, with no alignment required; the value is read or written
 * byte by byte, least significant first, so the result is the same on any
 * host byte order. Nothing is checked: the caller owns the bounds. */
#ifndef ST_LE_H
#define ST_LE_H

#include <stdint.h>

static inline uint16_t st_le_ld16(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t st_le_ld32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static inline uint64_t st_le_ld64(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)st_le_ld32(b) | ((uint64_t)st_le_ld32(b + 4) << 32);
}

static inline void st_le_st16(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline void st_le_st32(void *p, uint32_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void st_le_st64(void *p, uint64_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

#endif
