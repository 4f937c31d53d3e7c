/* pipe_gate.c - connection caps, eviction and the unproven deadline of a
 * listening socket (pipe_gate.h has the design). */
#include "common/net/pipe_gate.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/clock.h"
#include "common/base/log.h"

#define PG "gate"
#define PG_ADDR_BYTES 16 /* an IPv6 address; IPv4 uses the first 4 */

/* pg_addr - who a connection comes from: the family and the address
 * (no port: one host's connections count together). */
typedef struct pg_addr {
    uint16_t family;
    uint8_t a[PG_ADDR_BYTES];
} pg_addr;

/* What a connection has shown (pipe_gate.h, "States"). */
typedef enum pg_state {
    PG_NEW = 0, /* no complete frame yet: it may be holding a partial one */
    PG_PENDING, /* a complete frame, not judged yet (st_pipe_gate_seen) */
    PG_FAILED,  /* a frame failed authentication, none passed */
    PG_PROVEN,  /* a frame passed authentication */
} pg_state;

typedef struct pg_pipe {
    uint32_t id;    /* nng_pipe_id */
    pg_state state;
    uint64_t t_ns;  /* when it connected (st_now_ns) */
    pg_addr addr;
} pg_pipe;

struct st_pipe_gate {
    pthread_mutex_t mu;
    st_pipe_gate_cfg cfg;
    pg_pipe *pipes; /* [cfg.max_pipes]; n in use, unordered */
    uint32_t n;
    st_pipe_gate_counts c; /* refused, evicted, expired (pipes, unproven: computed) */
    nng_aio *timer;        /* the deadline sweep; NULL without unproven_ms */
    bool closing;          /* the sweep does not re-arm */
};

uint32_t st_pipe_gate_unproven_for(size_t max_frame)
{
    size_t n = max_frame ? ST_PIPE_GATE_UNPROVEN_BYTES / max_frame : ST_PIPE_GATE_UNPROVEN_MAX;
    if (n < ST_PIPE_GATE_UNPROVEN_MIN)
        n = ST_PIPE_GATE_UNPROVEN_MIN;
    if (n > ST_PIPE_GATE_UNPROVEN_MAX)
        n = ST_PIPE_GATE_UNPROVEN_MAX;
    return (uint32_t)n;
}

st_pipe_gate_cfg st_pipe_gate_cfg_for(const char *name, size_t max_frame, int peers_speak_first)
{
    st_pipe_gate_cfg c = {
        .name = name,
        .max_frame = max_frame,
        .max_pipes = ST_PIPE_GATE_MAX_PIPES,
        .max_per_addr = ST_PIPE_GATE_MAX_PER_ADDR,
        .max_unproven = st_pipe_gate_unproven_for(max_frame),
        .max_new = st_pipe_gate_unproven_for(max_frame),
        .unproven_ms = peers_speak_first ? ST_PIPE_GATE_UNPROVEN_MS : 0,
    };
    return c;
}

/* pg_remote - p's remote address; false for a connection not gated
 * (inproc://, in this process). An address NNG cannot give counts as one
 * unknown address of its family. */
static bool pg_remote(nng_pipe p, pg_addr *out)
{
    memset(out, 0, sizeof *out);
    nng_sockaddr sa;
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
        return true;
    out->family = sa.s_family;
    switch (sa.s_family) {
    case NNG_AF_INPROC:
        return false;
    case NNG_AF_INET:
        memcpy(out->a, &sa.s_in.sa_addr, sizeof sa.s_in.sa_addr);
        break;
    case NNG_AF_INET6:
        memcpy(out->a, sa.s_in6.sa_addr, sizeof sa.s_in6.sa_addr);
        break;
    default: /* ipc and others: one local "address" */
        break;
    }
    return true;
}

static bool pg_same(const pg_addr *a, const pg_addr *b)
{
    return a->family == b->family && memcmp(a->a, b->a, sizeof a->a) == 0;
}

/* pg_victim - under g->mu: the index of the connection to evict for a
 * newcomer from addr, g->n for none. Candidates are the NEW and FAILED
 * ones (at most cfg.max_new, so this is small), only those connected at
 * least ST_PIPE_GATE_GRACE_MS ago when aged_only. Among them: first the
 * aged ones, then the address with the most candidates (the newcomer
 * counted with its own), then the oldest. */
static uint32_t pg_victim(const st_pipe_gate *g, const pg_addr *addr, uint64_t now, bool aged_only)
{
    uint64_t grace = (uint64_t)ST_PIPE_GATE_GRACE_MS * 1000000u;
    uint32_t un[ST_PIPE_GATE_MAX_PIPES] = {0}, k = 0;
    for (uint32_t i = 0; i < g->n && k < ST_PIPE_GATE_MAX_PIPES; i++)
        if ((g->pipes[i].state == PG_NEW || g->pipes[i].state == PG_FAILED) &&
            (!aged_only || now - g->pipes[i].t_ns >= grace))
            un[k++] = i;
    if (k == 0)
        return g->n;
    uint32_t best = g->n, best_count = 0;
    bool best_aged = false;
    for (uint32_t a = 0; a < k; a++) {
        const pg_pipe *pa = &g->pipes[un[a]];
        uint32_t count = pg_same(&pa->addr, addr) ? 1 : 0, oldest = un[a];
        for (uint32_t b = 0; b < k; b++) {
            const pg_pipe *pb = &g->pipes[un[b]];
            if (!pg_same(&pb->addr, &pa->addr))
                continue;
            count++;
            if (pb->t_ns < g->pipes[oldest].t_ns)
                oldest = un[b];
        }
        bool aged = now - g->pipes[oldest].t_ns >= grace;
        bool better = best == g->n || (aged && !best_aged) ||
                      (aged == best_aged &&
                       (count > best_count ||
                        (count == best_count && g->pipes[oldest].t_ns < g->pipes[best].t_ns)));
        if (better) {
            best = oldest;
            best_count = count;
            best_aged = aged;
        }
    }
    return best;
}

static void pg_remove(st_pipe_gate *g, uint32_t i) { g->pipes[i] = g->pipes[--g->n]; }

static nng_pipe pg_pipe_of(uint32_t id)
{
    nng_pipe p;
    memset(&p, 0, sizeof p);
    p.id = id;
    return p;
}

/* pg_admit - ADD_PRE: a connection beyond a cap is closed before the
 * socket sees it; one beyond max_unproven NEW or FAILED ones evicts an
 * aged one of them, one beyond max_new any one (pg_victim). */
static void pg_admit(st_pipe_gate *g, nng_pipe p)
{
    pg_addr addr;
    if (!pg_remote(p, &addr))
        return;
    uint32_t victim = 0; /* a pipe id; 0 is never one */
    bool refuse = false;
    pthread_mutex_lock(&g->mu);
    uint32_t from_addr = 0, unsure = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        from_addr += pg_same(&g->pipes[i].addr, &addr);
        unsure += g->pipes[i].state == PG_NEW || g->pipes[i].state == PG_FAILED;
    }
    if (g->n >= g->cfg.max_pipes || from_addr >= g->cfg.max_per_addr) {
        refuse = true;
        g->c.refused++;
    } else {
        uint64_t now = st_now_ns();
        uint32_t v = g->n;
        if (unsure >= g->cfg.max_new) /* the hard cap: the oldest goes, however young */
            v = pg_victim(g, &addr, now, false);
        else if (unsure >= g->cfg.max_unproven) /* over the steady cap: an aged one, if any */
            v = pg_victim(g, &addr, now, true);
        if (v != g->n) {
            victim = g->pipes[v].id;
            pg_remove(g, v); /* its REM_POST then finds nothing */
            g->c.evicted++;
        }
        g->pipes[g->n++] = (pg_pipe){.id = (uint32_t)nng_pipe_id(p), .t_ns = now, .addr = addr};
    }
    uint32_t n = g->n;
    pthread_mutex_unlock(&g->mu);
    if (refuse) {
        st_log(ST_LOG_DEBUG, PG, "%s: connection %d refused (%u connections, %u from its address)",
               g->cfg.name, nng_pipe_id(p), n, from_addr);
        nng_pipe_close(p);
    }
    if (victim != 0) {
        st_log(ST_LOG_DEBUG, PG, "%s: unauthenticated connection %u closed for connection %d",
               g->cfg.name, victim, nng_pipe_id(p));
        nng_pipe_close(pg_pipe_of(victim));
    }
}

static void pg_gone(st_pipe_gate *g, nng_pipe p)
{
    uint32_t id = (uint32_t)nng_pipe_id(p);
    pthread_mutex_lock(&g->mu);
    for (uint32_t i = 0; i < g->n; i++)
        if (g->pipes[i].id == id) {
            pg_remove(g, i);
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

static void pg_notify(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    if (ev == NNG_PIPE_EV_ADD_PRE)
        pg_admit(arg, p);
    else if (ev == NNG_PIPE_EV_REM_POST)
        pg_gone(arg, p);
}

/* pg_sweep - the timer: closes unproven connections past unproven_ms. */
static void pg_sweep(void *arg)
{
    st_pipe_gate *g = arg;
    if (nng_aio_result(g->timer) != 0)
        return; /* stopped */
    enum { PG_SWEEP_BATCH = 64 };
    uint32_t ids[PG_SWEEP_BATCH];
    size_t k = 0;
    uint64_t now = st_now_ns(), age = (uint64_t)g->cfg.unproven_ms * 1000000u;
    pthread_mutex_lock(&g->mu);
    for (uint32_t i = 0; i < g->n && k < PG_SWEEP_BATCH;) {
        if (g->pipes[i].state != PG_PROVEN && now - g->pipes[i].t_ns >= age) {
            ids[k++] = g->pipes[i].id;
            pg_remove(g, i); /* its REM_POST then finds nothing */
            g->c.expired++;
            continue;
        }
        i++;
    }
    bool again = !g->closing;
    pthread_mutex_unlock(&g->mu);
    for (size_t i = 0; i < k; i++) {
        st_log(ST_LOG_DEBUG, PG, "%s: connection %u sent no authenticated frame in %u ms: closed",
               g->cfg.name, ids[i], g->cfg.unproven_ms);
        nng_pipe_close(pg_pipe_of(ids[i]));
    }
    if (again)
        nng_sleep_aio(k == PG_SWEEP_BATCH ? 0 : ST_PIPE_GATE_SWEEP_MS, g->timer);
}

st_err st_pipe_gate_open(nng_socket s, const st_pipe_gate_cfg *cfg, st_pipe_gate **out)
{
    *out = NULL;
    if (cfg->max_pipes == 0 || cfg->max_per_addr == 0 || cfg->max_per_addr > cfg->max_pipes ||
        cfg->max_unproven == 0 || cfg->max_new < cfg->max_unproven ||
        cfg->max_new > cfg->max_pipes)
        return st_errorf(ST_EINVAL,
                         "%s: connection caps %u, %u per address, %u unauthenticated (%u at "
                         "most) are not in 1..connections",
                         cfg->name, cfg->max_pipes, cfg->max_per_addr, cfg->max_unproven,
                         cfg->max_new);
    st_pipe_gate *g = calloc(1, sizeof *g);
    if (g == NULL || (g->pipes = calloc(cfg->max_pipes, sizeof *g->pipes)) == NULL) {
        free(g);
        return st_errorf(ST_ENOMEM, "%s: connection table", cfg->name);
    }
    g->cfg = *cfg;
    pthread_mutex_init(&g->mu, NULL);
    int rv;
    if (cfg->unproven_ms != 0 && (rv = nng_aio_alloc(&g->timer, pg_sweep, g)) != 0) {
        st_pipe_gate_close(g);
        return st_err_nng(rv, "connection deadline timer");
    }
    if ((rv = nng_pipe_notify(s, NNG_PIPE_EV_ADD_PRE, pg_notify, g)) != 0 ||
        (rv = nng_pipe_notify(s, NNG_PIPE_EV_REM_POST, pg_notify, g)) != 0) {
        st_pipe_gate_close(g);
        return st_err_nng(rv, "pipe callbacks");
    }
    if (g->timer != NULL)
        nng_sleep_aio(ST_PIPE_GATE_SWEEP_MS, g->timer);
    st_log(ST_LOG_INFO, PG,
           "%s socket: frames of at most %zu bytes; connections at most %u (%u from one "
           "address), %u unauthenticated (%u for a second)%s",
           cfg->name, cfg->max_frame, cfg->max_pipes, cfg->max_per_addr, cfg->max_unproven,
           cfg->max_new,
           cfg->unproven_ms ? ", each closed if it sent no authenticated frame in time" : "");
    *out = g;
    return ST_OK;
}

/* pg_mark - under no lock: moves msg's connection to state to, from the
 * states below it only (PROVEN stays; FAILED does not go back to PENDING). */
static void pg_mark(st_pipe_gate *g, const nng_msg *msg, pg_state to)
{
    if (g == NULL || msg == NULL)
        return;
    uint32_t id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    pthread_mutex_lock(&g->mu);
    for (uint32_t i = 0; i < g->n; i++)
        if (g->pipes[i].id == id) {
            if (g->pipes[i].state < to)
                g->pipes[i].state = to;
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

void st_pipe_gate_seen(st_pipe_gate *g, const nng_msg *msg) { pg_mark(g, msg, PG_PENDING); }

void st_pipe_gate_failed(st_pipe_gate *g, const nng_msg *msg) { pg_mark(g, msg, PG_FAILED); }

void st_pipe_gate_vouch(st_pipe_gate *g, const nng_msg *msg) { pg_mark(g, msg, PG_PROVEN); }

void st_pipe_gate_add_counts(st_pipe_gate *g, st_pipe_gate_counts *sum)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    sum->refused += g->c.refused;
    sum->evicted += g->c.evicted;
    sum->expired += g->c.expired;
    sum->pipes += g->n;
    for (uint32_t i = 0; i < g->n; i++)
        sum->unproven += g->pipes[i].state != PG_PROVEN;
    pthread_mutex_unlock(&g->mu);
}

void st_pipe_gate_close(st_pipe_gate *g)
{
    if (g == NULL)
        return;
    if (g->timer != NULL) {
        pthread_mutex_lock(&g->mu);
        g->closing = true;
        pthread_mutex_unlock(&g->mu);
        nng_aio_stop(g->timer);
        nng_aio_free(g->timer);
    }
    pthread_mutex_destroy(&g->mu);
    free(g->pipes);
    free(g);
}
