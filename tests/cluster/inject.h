/* inject.h - what the inject test tool's files share: inject.c's
 * helpers (sending, replies, hashes, dialing) and the commands of its
 * other files (inject_ctl.c: `inject sec`). A test tool, not a library. */
#ifndef ST_TESTS_INJECT_H
#define ST_TESTS_INJECT_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/envelope.h"

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

/* inj_dial - a PUSH (req false) or REQ socket dialing addr; 1 (reported)
 * if not. */
int inj_dial(const char *addr, bool req, nng_socket *s);

/* inj_ctl_main - `inject sec CASE ARGS... [--sender N]` (argv from CASE). */
int inj_ctl_main(int argc, char **argv);

/* inj_role_main - `inject role ADDR CASE [--key | --client-key |
 * --admin-key FILE] [--id N] [--count N] [--hold-ms N]` (inject_role.c;
 * argv whole). */
int inj_role_main(int argc, char **argv);

#endif
