/* fetch_impl.h - a weight fetch's state (struct st_fetch), shared by
 * fetch.c (the fetch loop: the cache and its journal, chunks, progress,
 * the handle) and fetch_src.c (the source table: dialling, requests,
 * which source to ask, strikes and the set-aside rule). Nothing outside
 * those two files includes it. */
#ifndef ST_WORKER_FETCH_IMPL_H
#define ST_WORKER_FETCH_IMPL_H

#include <limits.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/wire/envelope.h"
#include "common/model/manifest.h"
#include "common/wire/msg.h"
#include "worker/fetch/fetch.h"

#define FT "fetch" /* the log tag */
#define FETCH_ADDR_MAX ST_FETCH_ADDR_MAX

typedef struct ft_source {
    char addr[FETCH_ADDR_MAX];
    nng_socket s;
    bool open, dead;
    int strikes;
    uint64_t asked;      /* requests sent to it */
    uint64_t timeouts;   /* of them, not answered within the call timeout */
    uint32_t streak;     /* timeouts in a row (0 after any answer) */
    uint64_t aside_turn; /* set aside until f->turns reaches this */
    double aside_until;  /* and until this time (st_now_s) */
} ft_source;

struct st_fetch {
    st_fetch_cfg cfg;
    char *cache_dir;
    ft_source src[2 * ST_FETCH_MAX_SOURCES]; /* the configured [0, n_cfg), then extra ones */
    int n_src, n_cfg, cur;                   /* n_src: written under mu (st_fetch_stop) */
    uint64_t turns;                          /* requests sent to any source */
    int call_ms;                             /* one request's wait */
    st_env env;
    bool env_ok;
    st_manifest m;
    bool have_m;
    char dir[PATH_MAX], path[PATH_MAX], jpath[PATH_MAX];
    int fd, jfd;
    bool *have;             /* [n_chunks]: verified on disk */
    uint64_t fetched_total; /* stage chunks fetched by this process (the pause hook) */
    pthread_mutex_t mu;     /* guards st, stop, the sockets' closing and starting call */
    pthread_cond_t cv;
    bool stop;
    nng_aio *call; /* the request or reply in flight (ft_call): st_fetch_stop cancels it */
    st_fetch_stats st;
    double t0, last_log;
    const char *what; /* "header" or "stage", in the progress lines */
};

/* ft_stopped - whether st_fetch_stop was called (fetch.c). */
bool ft_stopped(st_fetch *f);

/* The source table (fetch_src.c). */

/* ft_sources_parse - dials the configured sources: list is --weights-from's
 * tcp:// addresses separated by commas (ST_EINVAL for more than
 * ST_FETCH_MAX_SOURCES, an empty or overlong one, or another scheme). The
 * sockets dialled before an error stay in f->src for st_fetch_close. */
st_err ft_sources_parse(st_fetch *f, const char *list);

/* ft_alive - how many sources are still used (not dropped for bad data). */
uint32_t ft_alive(const st_fetch *f);

/* ft_call - one request to source s; the reply in *r (ST_ECANCELED once
 * the fetch is stopped). A timeout sets s aside; any reply (an Error too)
 * brings it back. */
st_err ft_call(st_fetch *f, ft_source *s, const Strata__Msg *m, Strata__Msg **r);

/* ft_strike - source s sent a chunk that failed verification (why): counted
 * as a bad chunk; at ST_FETCH_STRIKES the source is no longer used. */
void ft_strike(st_fetch *f, int s, const char *why);

/* ft_next - the live source to ask after s for a chunk that failed at the
 * sources in tried (bit i: source i); -1 when none is live. */
int ft_next(const st_fetch *f, int s, uint32_t tried);

#endif
