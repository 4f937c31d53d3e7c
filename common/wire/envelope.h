/* envelope.h - the frame around every cluster message, and the cluster key.
 *
 * Layout (little-endian, 32-byte header):
 *   0  magic "STEN"        4  version u16 (1)   6  flags u16 (bit 0: MAC,
 *   8  kind u16            10 key id u16           bit 1: SEALED, bit 2: TO,
 *   12 sender u64          20 seq u64              bit 3: REPLY)
 *   28 body_len u32        32 body[body_len]
 *   MAC:    then mac[32] = HMAC-SHA-512-256(key, bytes [0, 32 + body_len)
 *           || binding), libsodium's crypto_auth over those bytes.
 *   SEALED: the body is XChaCha20-Poly1305 ciphertext (libsodium
 *           crypto_aead_xchacha20poly1305_ietf, detached), then tag[16];
 *           additional data = the 32-byte header || binding; nonce (24
 *           bytes) = sender u64 LE || seq u64 LE || 8 zero bytes.
 *   binding (24 bytes, authenticated, never sent): receiver u64 LE ||
 *           request sender u64 LE || request seq u64 LE. TO: receiver is
 *           the id of the receiving st_env (its `sender`), the others 0.
 *           REPLY: the frame answers the request (S, Q): receiver = S,
 *           request sender = S, request seq = Q. Neither: all 0 (the
 *           sender does not know its receiver yet). TO and REPLY need a
 *           MAC or a seal (issue 12, finding 8).
 * Kinds: 1 control (a protobuf Msg), 2 step (StepMeta length u32, StepMeta,
 * activation packet), 3 result (a protobuf Msg with a StepResult).
 *
 * With a cluster key every frame must carry a valid MAC and a sequence
 * number its sender has not used before: above the highest accepted from
 * that sender, or at most ST_ENV_REPLAY_WINDOW - 1 below it and not yet
 * accepted (a sliding anti-replay window, as IPsec's and DTLS's: frames a
 * receiver opens out of order, such as pipelined requests whose receive
 * completions ran concurrently, are taken once each; anything older than
 * the window, or seen, is refused as a replay). Only a frame that passed
 * every other check (tag, mode, clock) is recorded, so a forged frame
 * neither uses up a number nor moves the window.
 * Sequence numbers are wall-clock microseconds: each frame takes the
 * current time, or the last number + 1 if that is not above it, so a
 * restarted process keeps counting upwards. A receiver refuses a frame
 * whose number is more than ST_ENV_WINDOW_US away from its own clock (the
 * cluster's clocks must agree within that), so a captured frame replays
 * only within ST_ENV_WINDOW_US; a restarted receiver's table is empty, so
 * within that window only the binding below refuses it (a keyed
 * coordinator takes no unbound request but a Hello). Frames
 * failing any check are refused with ST_EAUTH and must be dropped and
 * counted: they change nothing (INV-5). Without a key, MACs are neither
 * sent nor required.
 *
 * Encryption (st_env_init_mode with encrypt): every frame is SEALED
 * instead of MACed; a receiver that encrypts refuses MAC-only frames and
 * one that does not refuses SEALED frames, each with a message that names
 * --encrypt, after checking the frame's own tag (so a stranger learns
 * nothing and a member in the other mode is told why). A frame whose tag
 * fails is never decrypted or parsed. Nonces never repeat under a key:
 * sender ids are unique per process side (random or start-time based) and
 * seq strictly increases per sender, starting at the wall clock.
 * The replay table (replay.h) is bounded (ST_ENV_MAX_PEERS senders, least
 * recently seen evicted, each window at most 2 KiB: replay.c), so no
 * map grows without bound (INV-6), and it cannot be flushed: evicting a
 * sender raises a floor to its highest number, a sender the table does not
 * hold must be above the floor, and a sender taken back into the table
 * keeps that floor as the bottom of its window, so a frame of an evicted
 * sender never replays (new senders start at the clock, above it).
 *
 * Credentials and roles (docs/security.md): the key id names which key
 * made the frame's MAC or tag. Id 0 is the cluster key (role MEMBER: the
 * coordinator and workers); any other id is st_key_id() of a client or
 * admin key, which a receiver accepts only after st_env_accept (only the
 * coordinator's control socket does). The receiver verifies the tag with
 * the keys of that id only (each check constant-time; ids of two keys
 * may collide, then both are tried) and reports the role of the key that
 * verified it in st_env_frame.role; a frame naming an id it does not hold
 * fails authentication like a bad MAC. A client key is never the cluster
 * key, and the MAC binds the key id, so no client can make a frame a
 * worker or the coordinator takes for a member's. The replay window is
 * kept per (sender, key), so one credential cannot push another's
 * sequence numbers forward. Without any key every frame is role OPEN.
 *
 * Receiver and request binding (keyed only): a request names the id of
 * the receiver it is meant for (st_env.to, or the learned peer), so a
 * frame captured on its way to one receiver fails the MAC at another one
 * sharing the key and at the same address after a restart (a new process
 * has a new id). A reply names the request it answers, and a REQ side
 * checks a REPLY frame against its last request (or st_env.expect), so a
 * reply cannot be replayed to another request or another requester.
 * Unbound requests pass st_env_open (the first request of a process
 * does not know its receiver's id yet); receivers that must only take
 * bound requests check st_env_frame.bound: the worker's Prepare, Commit
 * and EndSessions, and every request to a keyed coordinator but a Hello
 * (a requester with learn_peer sends one while st_env_unbound: msg.h's
 * st_msg_call, client.h), so a frame captured before a coordinator's
 * restart fails at the new one whether it was bound (the MAC names the
 * old id) or not (refused as unbound). */
#ifndef ST_ENVELOPE_H
#define ST_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/wire/replay.h"

#define ST_ENV_HDR 32
#define ST_ENV_MAC 32      /* crypto_auth_BYTES; the largest tag */
#define ST_ENV_AEAD_TAG 16 /* crypto_aead_xchacha20poly1305_ietf_ABYTES */
#define ST_ENV_FLAG_MAC 1u
#define ST_ENV_FLAG_SEALED 2u
#define ST_ENV_FLAG_TO 4u    /* the binding names the receiver */
#define ST_ENV_FLAG_REPLY 8u /* the binding names the request answered */
#define ST_ENV_BIND 24       /* bytes of the binding */
#define ST_ENV_VERSION 1
#define ST_ENV_MAX_BODY (256u << 20)
#define ST_ENV_WINDOW_US (60ull * 1000000u) /* a frame's clock may be this far off */
#define ST_KEY_BYTES 32
#define ST_ENV_MAX_CREDS 1024 /* keys one receiver accepts besides its own */
#define ST_KEY_TEXT_MIN 16    /* characters of a client or admin key, at least */
#define ST_KEY_TEXT_MAX 256   /* ... and at most */

/* Who verified a frame: the credential its key belongs to. */
typedef enum st_env_role {
    ST_ROLE_OPEN = 0,   /* no keys at all: an open (loopback) cluster */
    ST_ROLE_MEMBER = 1, /* the cluster key: coordinator, workers, trusted tools */
    ST_ROLE_ADMIN = 2,  /* an admin key */
    ST_ROLE_CLIENT = 3, /* a client key */
} st_env_role;

typedef enum st_env_kind {
    ST_ENV_CONTROL = 1,
    ST_ENV_STEP = 2,
    ST_ENV_RESULT = 3,
} st_env_kind;

/* A sender's identity and keys; one per process side, used by one thread
 * at a time (callers lock if they share it). */
typedef struct st_env {
    bool keyed;
    bool encrypt; /* frames are SEALED (needs keyed) */
    uint8_t key[ST_KEY_BYTES];
    uint16_t key_id;           /* 0: key is the cluster key; else st_key_id(key) */
    st_env_role role;          /* the role of key */
    struct st_env_cred *creds; /* keys accepted besides key (st_env_accept) */
    size_t n_creds;
    uint32_t seal_cred;    /* 0: seal with key; i > 0: with creds[i - 1] */
    st_env_role last_role; /* role and credential of the last frame st_env_open */
    uint32_t last_cred;    /* accepted (for callers that only see the body) */
    uint64_t sender;       /* our id in frames we send */
    uint64_t seq;          /* last sequence number sent */
    st_replay *replay;     /* senders' numbers accepted (keyed only; replay.h) */
    uint64_t auth_failed;  /* frames refused: MAC or tag, replay, other mode */
    /* binding (finding 8; see the top of this file) */
    uint64_t to;           /* receiver id the next request binds (taken by st_env_seal) */
    bool learn_peer;       /* a one-receiver REQ side: bind requests to `peer` */
    uint64_t peer;         /* the id that answered our last request (learn_peer) */
    bool answered;         /* our last request has its verified reply */
    uint64_t asked;        /* seq of our last request (0: none yet) */
    uint64_t expect;       /* seq of the request the next reply answers; 0: asked
                            * (taken by st_env_open) */
    uint64_t reply_sender; /* the next sealed frame answers (reply_sender, */
    uint64_t reply_seq;    /* reply_seq): st_env_reply_to; taken by st_env_seal */
    bool last_bound;       /* of the last frame st_env_open accepted: bound to us, */
    uint64_t last_seq;     /* and its sequence number */
} st_env;

typedef struct st_env_frame {
    st_env_kind kind;
    uint64_t sender;
    uint64_t seq;
    const uint8_t *body; /* into the checked buffer */
    size_t body_len;
    st_env_role role; /* of the key that verified it (OPEN without keys) */
    uint32_t cred;    /* 0: the receiver's own key; i > 0: its i-th accepted key */
    bool bound;       /* keyed, and its binding named this receiver (TO or REPLY) */
    bool reply;       /* a REPLY verified against our request */
} st_env_frame;

/* st_env_init - key NULL for an open cluster; sender is our id. */
st_err st_env_init(st_env *env, const uint8_t *key, uint64_t sender);

/* st_env_init_mode - st_env_init, and with encrypt every frame is sealed
 * (ST_EINVAL naming --cluster-key when encrypt is asked without a key). */
st_err st_env_init_mode(st_env *env, const uint8_t *key, bool encrypt, uint64_t sender);

/* st_env_init_cred - st_env_init_mode with a client or admin key (role
 * ST_ROLE_CLIENT or ST_ROLE_ADMIN, key from st_keyfile_read): frames carry
 * st_key_id(key). The CLI's side of those credentials. */
st_err st_env_init_cred(st_env *env, const uint8_t *key, st_env_role role, bool encrypt,
                        uint64_t sender);

/* st_env_accept - env (keyed with the cluster key) also accepts frames
 * made with key as role (ST_ROLE_CLIENT or ST_ROLE_ADMIN); ST_EINVAL
 * without a cluster key, for another role or for the cluster key itself,
 * ST_ERANGE beyond ST_ENV_MAX_CREDS keys. */
st_err st_env_accept(st_env *env, const uint8_t *key, st_env_role role);

/* st_env_seal_with - frames sealed from now on use credential cred (a
 * frame's st_env_frame.cred: answer a client with its own key); 0 goes
 * back to env's own key. ST_EINVAL for a credential env does not hold. */
st_err st_env_seal_with(st_env *env, uint32_t cred);

/* st_env_reply_to - the next frame env seals answers the request (sender,
 * seq) (a received frame's st_env_frame.sender and .seq): it is sealed as
 * a REPLY bound to that request. Without a key it changes nothing. */
void st_env_reply_to(st_env *env, uint64_t sender, uint64_t seq);

/* st_key_id - the 16-bit id of a client or admin key (never 0). */
uint16_t st_key_id(const uint8_t key[ST_KEY_BYTES]);

/* st_key_from_text - the MAC key of a client or admin key's text (a keyed
 * BLAKE2b of it, so the text can also be an HTTP bearer token); ST_EFORMAT
 * unless it has ST_KEY_TEXT_MIN..ST_KEY_TEXT_MAX printable characters. */
st_err st_key_from_text(const char *text, size_t len, uint8_t key[ST_KEY_BYTES]);

/* st_keyfile_read - the keys of a client or admin key file: one key per
 * line (its first whitespace-separated field; fields after it are the
 * file's own notes and ignored here), blank lines and lines starting with
 * '#' skipped. Refuses a file group or others can access (ST_EAUTH), a
 * key not of st_key_from_text's form and a file of no keys or more than
 * max (ST_EFORMAT / ST_ERANGE, naming the line). *keys (free it) holds *n
 * MAC keys. */
st_err st_keyfile_read(const char *path, size_t max, uint8_t (**keys)[ST_KEY_BYTES], size_t *n);

/* st_env_role_name - "open", "member", "admin" or "client". */
const char *st_env_role_name(st_env_role role);

/* st_env_fini - frees the replay table and wipes the key. */
void st_env_fini(st_env *env);

/* st_env_size - bytes of a frame with a body of body_len bytes. */
size_t st_env_size(const st_env *env, size_t body_len);

/* st_env_seal - writes the header before body (which the caller has put at
 * buf + ST_ENV_HDR) and the MAC after it, or encrypts body in place and
 * writes its tag after it; buf holds st_env_size bytes. Keyed, the frame
 * is a REPLY after st_env_reply_to, else a request bound TO env->to (then
 * reset to 0) or, with learn_peer, to the peer that answered the previous
 * request (none when it went unanswered: a restarted receiver has a new
 * id, so the next request is unbound and learns it again). */
st_err st_env_seal(st_env *env, st_env_kind kind, uint8_t *buf, size_t body_len);

/* st_env_unbound - whether env, a keyed REQ side that learns its peer
 * (learn_peer), would send its next request unbound: it has no verified
 * reply to its last request (none sent yet, or it went unanswered: the
 * receiver may have restarted with a new id). A keyed coordinator takes
 * no request unbound but a Hello (docs/security.md, "Replay"), so such a
 * requester first sends one (st_msg_hello) to learn the id. False without
 * a key or without learn_peer. */
bool st_env_unbound(const st_env *env);

/* st_env_open - checks a received frame (magic, version, flags, length,
 * MAC or tag with its binding, mode and replay when keyed) before anything
 * else reads it, decrypts a SEALED body in place (buf is modified), and
 * fills f (ST_ENOMEM if a new sender's replay window cannot be allocated).
 * A REPLY is checked against env->expect (taken: reset to 0), or else
 * env->asked; with learn_peer a verified reply to env->asked makes
 * its sender the peer later requests bind. */
st_err st_env_open(st_env *env, uint8_t *buf, size_t len, st_env_frame *f);

/* st_key_generate - writes a new random key to path with mode 0600
 * (refuses to overwrite). */
st_err st_key_generate(const char *path);

/* st_key_write - writes key to path with mode 0600, replacing a file
 * that is there (a dead process's). */
st_err st_key_write(const char *path, const uint8_t key[ST_KEY_BYTES]);

/* st_key_load - reads a 32-byte key; refuses a file that group or others
 * can read, or of another size. */
st_err st_key_load(const char *path, uint8_t key[ST_KEY_BYTES]);

#endif
