/* fuzz_replay.c - libFuzzer target of the envelope's anti-replay window
 * (common/wire/replay.c, through st_env_open): which sequence numbers a keyed
 * receiver takes from many senders, in any order.
 *
 * Input: one mode byte, then frames. Mode bit 0x02: the receiver encrypts
 * (--encrypt); the receiver always has the cluster key 0x5C x 32 (a
 * keyless receiver keeps no window). The bytes are frames to open, 4 bytes
 * each: sender u16 LE (modulo FE_SENDERS, twice the replay table) and
 * sequence number u16 LE (an offset from a point ahead of the clock,
 * spanning 4 replay windows), at most FE_MAX_OPS; each is sealed with that
 * sender and number and opened. No (sender, number) may be accepted twice,
 * and a number above every one opened before must be accepted. Seed
 * fuzz/seeds/fuzz_replay/replay-evict: 1100 senders (more than the table
 * holds) each opening two frames out of order, then replays of some and
 * jumps around one sender's window. (The frame parser and the seal's round
 * trip are fuzz_envelope.c's.) */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/wire/envelope.h"

#define FE_KEY_BYTE 0x5Cu
#define FE_MODE_ENCRYPT 0x02u
#define FE_SENDERS (2u * ST_ENV_MAX_PEERS) /* < 2^16 */
#define FE_OP_BYTES 4u
#define FE_MAX_OPS 4096u
#define FE_SET_SLOTS (2u * FE_MAX_OPS) /* open addressing, power of two */
#define FE_AHEAD_US (10ull * 1000000u) /* within ST_ENV_WINDOW_US of the clock */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fe_check(int cond)
{
    if (!cond)
        abort();
}

/* fe_accept_new - records (sender, off) in the set (keys + 1, 0 empty);
 * whether it was not there yet. */
static int fe_accept_new(uint64_t *set, uint64_t sender, uint64_t off)
{
    uint64_t key = (off << 16 | sender) + 1; /* sender < 2^16, off < 2^48 */
    for (uint64_t i = key * 0x9E3779B97F4A7C15ull;; i++) {
        uint64_t *s = &set[i % FE_SET_SLOTS];
        if (*s == key)
            return 0;
        if (*s == 0) {
            *s = key;
            return 1;
        }
    }
}

/* fe_replay - the frames of data[0..size) (see the top). */
static void fe_replay(const uint8_t key[ST_KEY_BYTES], int enc, const uint8_t *data, size_t size)
{
    st_env tx, rx;
    fe_check(st_env_init_mode(&tx, key, enc, 1) == ST_OK);
    fe_check(st_env_init_mode(&rx, key, enc, 2) == ST_OK);
    uint64_t *set = calloc(FE_SET_SLOTS, sizeof *set);
    fe_check(set != NULL);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    uint64_t base = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec + FE_AHEAD_US, top = 0;
    uint8_t buf[ST_ENV_HDR + ST_ENV_MAC];
    size_t n = size / FE_OP_BYTES < FE_MAX_OPS ? size / FE_OP_BYTES : FE_MAX_OPS;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *op = data + i * FE_OP_BYTES;
        tx.sender = 1 + (op[0] | (uint64_t)op[1] << 8) % FE_SENDERS;
        tx.seq = base + (op[2] | (uint64_t)op[3] << 8);
        fe_check(st_env_seal(&tx, ST_ENV_CONTROL, buf, 0) == ST_OK);
        uint64_t seq = tx.seq; /* tx.seq + 1 unless the clock passed it */
        st_env_frame f;
        if (st_env_open(&rx, buf, st_env_size(&tx, 0), &f) == ST_OK)
            fe_check(fe_accept_new(set, tx.sender, seq - base));
        else
            fe_check(seq <= top);
        top = seq > top ? seq : top;
    }
    free(set);
    st_env_fini(&tx);
    st_env_fini(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t key[ST_KEY_BYTES];
    memset(key, FE_KEY_BYTE, sizeof key);
    fe_replay(key, (data[0] & FE_MODE_ENCRYPT) != 0, data + 1, size - 1);
    return 0;
}
