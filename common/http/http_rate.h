/* http_rate.h - the rate limits of the HTTP services (the coordinator's
 * gateway, strata-embed): token buckets per identity (an API key, or a
 * client address when there are no keys), one for requests per minute and
 * one for tokens per minute (generated tokens; strata-embed counts the
 * rows it computes).
 *
 * A bucket holds at most a minute's allowance and refills continuously at
 * limit / 60 per second. A request takes one request token; it is
 * refused while the request bucket is below one or the token bucket is
 * below one (in debt). Generated tokens are spent as they stream, so a
 * long reply may take the token bucket below zero: the debt delays the
 * identity's next requests, not the reply in progress. A refusal says
 * when to retry: the whole seconds until both buckets allow a request.
 *
 * The table is bounded: at most `cap` identities; a new identity when it
 * is full evicts the least recently seen one (whose buckets have usually
 * refilled: an identity seen within its last minute is rarely the oldest
 * when the table is large enough for the clients of a minute). Memory is
 * allocated once at open. Thread-safe (one mutex); the clock is the
 * caller's, so tests inject it. */
#ifndef ST_HTTP_RATE_H
#define ST_HTTP_RATE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/http/http_keys.h"

#define ST_HTTP_RATE_ID_MAX 64 /* bytes of an identity (longer ones are hashed) */
#define ST_HTTP_RATE_MAX_TABLE (1u << 22)

typedef struct st_http_rate st_http_rate;

/* st_http_rate_open - a table of cap (1..ST_HTTP_RATE_MAX_TABLE) identities. */
st_err st_http_rate_open(uint32_t cap, st_http_rate **out);

/* st_http_rate_close - NULL is a no-op. */
void st_http_rate_close(st_http_rate *r);

/* st_http_rate_admit - one request of identity id under lim at now_ns:
 * 0 when admitted (a request token taken), else the seconds to wait
 * (>= 1) before a request would be admitted. With both limits 0 nothing
 * is recorded and 0 is returned. */
uint32_t st_http_rate_admit(st_http_rate *r, const char *id, st_http_limits lim, uint64_t now_ns);

/* st_http_rate_wait - what st_http_rate_admit would answer for id under
 * lim at now_ns, taking nothing and recording nothing (an identity not in
 * the table: 0). The gateway checks a client address's bucket with it
 * before it looks at a presented key, so an address that spent its
 * allowance on wrong keys has no key checked until it refills. */
uint32_t st_http_rate_wait(st_http_rate *r, const char *id, st_http_limits lim, uint64_t now_ns);

/* st_http_rate_spend - identity id generated n tokens at now_ns. */
void st_http_rate_spend(st_http_rate *r, const char *id, st_http_limits lim, uint32_t n,
                        uint64_t now_ns);

/* st_http_rate_entries - identities in the table now. */
size_t st_http_rate_entries(st_http_rate *r);

#endif
