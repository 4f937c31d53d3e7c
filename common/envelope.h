/* envelope.h - the frame around every cluster message, and the cluster key.
 *
 * Layout (little-endian, 32-byte header):
 *   0  magic "STEN"        4  version u16 (1)   6  flags u16 (bit 0: MAC,
 *   8  kind u16            10 reserved u16 (0)     bit 1: SEALED)
 *   12 sender u64          20 seq u64           28 body_len u32
 *   32 body[body_len]
 *   MAC:    then mac[32] = crypto_auth(key, bytes [0, 32 + body_len)).
 *   SEALED: the body is XChaCha20-Poly1305 ciphertext (libsodium
 *           crypto_aead_xchacha20poly1305_ietf, detached), then tag[16];
 *           additional data = the 32-byte header; nonce (24 bytes) =
 *           sender u64 LE || seq u64 LE || 8 zero bytes.
 * Kinds: 1 control (a protobuf Msg), 2 step (StepMeta length u32, StepMeta,
 * activation packet), 3 result (a protobuf Msg with a StepResult).
 *
 * With a cluster key every frame must carry a valid MAC and a sequence
 * number above the last one accepted from its sender (replay refused);
 * senders start their sequence at the wall clock in microseconds, so a
 * restarted process keeps counting upwards. Frames failing either check
 * are refused with ST_EAUTH and must be dropped and counted: they change
 * nothing (INV-5). Without a key, MACs are neither sent nor required.
 *
 * Encryption (st_env_init_mode with encrypt): every frame is SEALED
 * instead of MACed; a receiver that encrypts refuses MAC-only frames and
 * one that does not refuses SEALED frames, each with a message that names
 * --encrypt, after checking the frame's own tag (so a stranger learns
 * nothing and a member in the other mode is told why). A frame whose tag
 * fails is never decrypted or parsed. Nonces never repeat under a key:
 * sender ids are unique per process side (random or start-time based) and
 * seq strictly increases per sender, starting at the wall clock.
 * The replay table is bounded (ST_ENV_MAX_PEERS senders, least recently
 * seen evicted), so no map grows without bound (INV-6). */
#ifndef ST_ENVELOPE_H
#define ST_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define ST_ENV_HDR 32
#define ST_ENV_MAC 32          /* crypto_auth_BYTES; the largest tag */
#define ST_ENV_AEAD_TAG 16     /* crypto_aead_xchacha20poly1305_ietf_ABYTES */
#define ST_ENV_FLAG_MAC 1u
#define ST_ENV_FLAG_SEALED 2u
#define ST_ENV_VERSION 1
#define ST_ENV_MAX_BODY (256u << 20)
#define ST_ENV_MAX_PEERS 1024
#define ST_KEY_BYTES 32

typedef enum st_env_kind {
    ST_ENV_CONTROL = 1,
    ST_ENV_STEP = 2,
    ST_ENV_RESULT = 3,
} st_env_kind;

/* A sender's identity and keys; one per process side, used by one thread
 * at a time (callers lock if they share it). */
typedef struct st_env {
    bool keyed;
    bool encrypt;     /* frames are SEALED (needs keyed) */
    uint8_t key[ST_KEY_BYTES];
    uint64_t sender;  /* our id in frames we send */
    uint64_t seq;     /* last sequence number sent */
    struct st_env_peer *peers; /* [ST_ENV_MAX_PEERS] replay window */
    uint64_t tick;
    uint64_t auth_failed; /* frames refused: MAC or tag, replay, other mode */
} st_env;

typedef struct st_env_frame {
    st_env_kind kind;
    uint64_t sender;
    uint64_t seq;
    const uint8_t *body; /* into the checked buffer */
    size_t body_len;
} st_env_frame;

/* st_env_init - key NULL for an open cluster; sender is our id. */
st_err st_env_init(st_env *env, const uint8_t *key, uint64_t sender);

/* st_env_init_mode - st_env_init, and with encrypt every frame is sealed
 * (ST_EINVAL naming --cluster-key when encrypt is asked without a key). */
st_err st_env_init_mode(st_env *env, const uint8_t *key, bool encrypt, uint64_t sender);

/* st_env_fini - frees the replay table and wipes the key. */
void st_env_fini(st_env *env);

/* st_env_size - bytes of a frame with a body of body_len bytes. */
size_t st_env_size(const st_env *env, size_t body_len);

/* st_env_seal - writes the header before body (which the caller has put at
 * buf + ST_ENV_HDR) and the MAC after it, or encrypts body in place and
 * writes its tag after it; buf holds st_env_size bytes. */
st_err st_env_seal(st_env *env, st_env_kind kind, uint8_t *buf, size_t body_len);

/* st_env_open - checks a received frame (magic, version, flags, length,
 * MAC or tag, mode and replay when keyed) before anything else reads it,
 * decrypts a SEALED body in place (buf is modified), and fills f. */
st_err st_env_open(st_env *env, uint8_t *buf, size_t len, st_env_frame *f);

/* st_key_generate - writes a new random key to path with mode 0600
 * (refuses to overwrite). */
st_err st_key_generate(const char *path);

/* st_key_load - reads a 32-byte key; refuses a file that group or others
 * can read, or of another size. */
st_err st_key_load(const char *path, uint8_t key[ST_KEY_BYTES]);

#endif
