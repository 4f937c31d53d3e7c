/* fuzz_envelope.c - libFuzzer target of the envelope around cluster
 * messages (common/wire/envelope.c), the first code that reads a remote frame.
 *
 * Input: one mode byte, then bytes. Mode bits:
 *   0x01  the receiver has the cluster key 0x5C x 32;
 *   0x02  the receiver encrypts (--encrypt; needs 0x01);
 *   0x04  the bytes are a body: seal it with a sender of the receiver's
 *         mode and open it (it must round trip), then flip one byte of
 *         the frame (the first body byte names it, modulo the frame
 *         length) and open again (a keyed receiver must refuse it).
 * Without 0x04 the bytes are a frame, opened from an exact-size
 * copy (so ASan sees any over-read); an accepted frame's body must lie
 * inside it. The anti-replay window has a target of its own
 * (fuzz_replay.c): its inputs are thousands of frames, which here would
 * starve the frame parser of runs. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/envelope.h"

#define FE_KEY_BYTE 0x5Cu
#define FE_MAX_BODY (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fe_check(int cond)
{
    if (!cond)
        abort();
}

static void fe_roundtrip(const uint8_t key[ST_KEY_BYTES], int keyed, int enc, const uint8_t *body,
                         size_t n)
{
    st_env tx, rx;
    fe_check(st_env_init_mode(&tx, keyed ? key : NULL, enc, 1) == ST_OK);
    fe_check(st_env_init_mode(&rx, keyed ? key : NULL, enc, 2) == ST_OK);
    size_t len = st_env_size(&tx, n);
    uint8_t *buf = malloc(len), *copy = malloc(len);
    fe_check(buf != NULL && copy != NULL);
    memcpy(buf + ST_ENV_HDR, body, n);
    fe_check(st_env_seal(&tx, ST_ENV_STEP, buf, n) == ST_OK);
    memcpy(copy, buf, len);
    st_env_frame f;
    fe_check(st_env_open(&rx, buf, len, &f) == ST_OK);
    fe_check(f.body_len == n && memcmp(f.body, body, n) == 0);
    size_t at = n ? body[0] % len : 0;
    copy[at] ^= 1u;
    st_err e = st_env_open(&rx, copy, len, &f); /* also a replay of the sequence number */
    fe_check(!keyed || e != ST_OK);
    free(buf);
    free(copy);
    st_env_fini(&tx);
    st_env_fini(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    int keyed = mode & 1, enc = keyed && (mode & 2);
    uint8_t key[ST_KEY_BYTES];
    memset(key, FE_KEY_BYTE, sizeof key);
    data++;
    size--;
    if (mode & 4) {
        if (size <= FE_MAX_BODY)
            fe_roundtrip(key, keyed, enc, data, size);
        return 0;
    }
    st_env rx;
    fe_check(st_env_init_mode(&rx, keyed ? key : NULL, enc, 2) == ST_OK);
    uint8_t *copy = malloc(size ? size : 1);
    fe_check(copy != NULL);
    memcpy(copy, data, size);
    st_env_frame f;
    if (st_env_open(&rx, copy, size, &f) == ST_OK)
        fe_check(f.body >= copy && f.body + f.body_len <= copy + size);
    free(copy);
    st_env_fini(&rx);
    return 0;
}
