/* inject.h - what the inject test tool's files share: inject.c's
 * helpers (sending, replies, hashes, dialing) and the commands of its
 * other files (inject_ctl.c: `inject sec`). A test tool, not a library. */
#ifndef ST_TESTS_INJECT_H
#define ST_TESTS_INJECT_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/envelope.h"

/* inj_usage - prints the usage; returns 2. */
int inj_usage(void);

/* inj_send_raw - sends buf[0..len) on s; 1 (reported) on failure. */
int inj_send_raw(nng_socket s, const uint8_t *buf, size_t len);

/* inj_print_reply - receives a control reply on s and prints it ("reply:
 * error CODE NAME: MESSAGE", "reply: refuse: REASON", "reply: KIND" or
 * "reply: none (...)"); 1 when none came. */
int inj_print_reply(nng_socket s, st_env *env);

/* inj_parse_hash - 64 hex digits into out; -1 if malformed. */
int inj_parse_hash(const char *hex, uint8_t out[32]);

/* inj_model_id - the model id of the GGUF file at path into out; 1
 * (reported) if it cannot be read. */
int inj_model_id(const char *path, uint8_t out[32]);

/* inj_dial - a PUSH (req false) or REQ socket dialing addr; 1 (reported)
 * if not. */
int inj_dial(const char *addr, bool req, nng_socket *s);

/* inj_bind_coord - binds env's next frame to the coordinator at addr, as
 * its clients' are (a keyed coordinator takes no request unbound but a
 * Hello: docs/security.md, "Replay"): its id is learnt once per process
 * from the Ack to a Hello, then set as env->to (taken by the next seal:
 * call before each frame). Without a key nothing. 1 (reported) if no Ack. */
int inj_bind_coord(const char *addr, st_env *env);

/* inj_key_take - the cluster key every command's frames carry: removes
 * each `--key FILE` and `--no-key` from argv (*argc updated) and loads
 * FILE into key; without either, the generated key of a keyless local
 * coordinator named by any tcp:// argument (common/net/exposure.h), so frames
 * to it are authenticated as its members' are; *keyed false when none
 * (--no-key: a stranger's keyless frames). 1 (reported) on error. */
int inj_key_take(int *argc, char **argv, uint8_t key[ST_KEY_BYTES], bool *keyed);

/* inj_ctl_main - `inject sec CASE ARGS... [--sender N]` (argv from CASE);
 * key: the cluster key or NULL. */
int inj_ctl_main(int argc, char **argv, const uint8_t *key);

/* inj_role_main - `inject role ADDR CASE [--client-key | --admin-key
 * FILE] [--id N] [--count N] [--hold-ms N]` (inject_role.c; argv whole,
 * --key already taken into key, used when no other credential is given). */
int inj_role_main(int argc, char **argv, const uint8_t *key);

/* inj_replay_main - `inject replay record|send|make ...`: frames' exact
 * bytes recorded through a proxy, made, and replayed (inject_replay.c). */
int inj_replay_main(int argc, char **argv, const uint8_t *key);

/* inj_silent_main - `inject silent LISTEN`: a REP socket that receives
 * requests, prints each, and never answers (inject_silent.c). */
int inj_silent_main(int argc, char **argv);

/* inj_experts_main - `inject experts ADDR MODEL N_LAYER N_EXPERT`: a fake
 * member's heartbeats with expert lists that fit the model and that do
 * not, the status after each (inject_experts.c). */
int inj_experts_main(int argc, char **argv, const uint8_t *key);

#endif
