/* http_guard.c - the per-address connection cap and the header and body
 * deadlines of the HTTP gateway (see http_guard.h). */
#include "coordinator/http/http_guard.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/clock.h"
#include "common/base/log.h"

#define GUARD "http"
#define GUARD_KEY_BYTES 16      /* an IPv6 address; IPv4 as ::ffff:a.b.c.d */
#define GUARD_V6_PREFIX_BYTES 8 /* an IPv6 client counts by its /64 */
#define GUARD_MAX_BUCKETS (1u << 16)
#define GUARD_NS_PER_MS 1000000ull
#define GUARD_NS_PER_S 1000000000ull
#define GUARD_FNV_OFFSET 2166136261u /* FNV-1a, 32-bit */
#define GUARD_FNV_PRIME 16777619u

/* One client address and its live connections. */
typedef struct guard_addr {
    uint8_t key[GUARD_KEY_BYTES];
    uint32_t conns;
    struct guard_addr *next; /* hash chain */
} guard_addr;

/* One live connection (MHD's socket context of it). */
typedef struct guard_conn {
    int fd;
    guard_addr *addr; /* NULL: its address was not IP */
    http_guard_ph ph;
    uint64_t since_ns; /* when ph began */
    bool shut;         /* shut down by the guard: not again */
    struct guard_conn *prev, *next;
} guard_conn;

struct http_guard {
    http_guard_cfg cfg;
    st_http_guard_counts *counts;
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t cv;
    guard_addr **heads;
    uint32_t n_heads; /* a power of two */
    guard_conn *conns;
    bool stop;
    pthread_t thr;
    bool thr_on;
};

/* guard_key - the table key of addr into key; false when it is not IP. */
static bool guard_key(const struct sockaddr *addr, socklen_t len, uint8_t key[GUARD_KEY_BYTES])
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(key, 0, GUARD_KEY_BYTES);
    if (addr == NULL)
        return false;
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        memcpy(key, v4mapped, sizeof v4mapped);
        memcpy(key + sizeof v4mapped, &a->sin_addr, sizeof a->sin_addr);
        return true;
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        memcpy(key, &a->sin6_addr, GUARD_KEY_BYTES);
        if (memcmp(key, v4mapped, sizeof v4mapped) != 0) /* not a mapped IPv4: its /64 */
            memset(key + GUARD_V6_PREFIX_BYTES, 0, GUARD_KEY_BYTES - GUARD_V6_PREFIX_BYTES);
        return true;
    }
    return false;
}

static guard_addr **guard_slot(http_guard *g, const uint8_t key[GUARD_KEY_BYTES])
{
    uint32_t h = GUARD_FNV_OFFSET;
    for (size_t i = 0; i < GUARD_KEY_BYTES; i++)
        h = (h ^ key[i]) * GUARD_FNV_PRIME;
    return &g->heads[h & (g->n_heads - 1)];
}

/* guard_find - the entry of key, or NULL (mu held). */
static guard_addr *guard_find(http_guard *g, const uint8_t key[GUARD_KEY_BYTES])
{
    for (guard_addr *a = *guard_slot(g, key); a; a = a->next)
        if (memcmp(a->key, key, GUARD_KEY_BYTES) == 0)
            return a;
    return NULL;
}

enum MHD_Result http_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_guard *g = cls;
    uint8_t key[GUARD_KEY_BYTES];
    if (g->cfg.per_ip == 0 || !guard_key(addr, addrlen, key))
        return MHD_YES;
    pthread_mutex_lock(&g->mu);
    guard_addr *a = guard_find(g, key);
    bool full = a && a->conns >= g->cfg.per_ip;
    pthread_mutex_unlock(&g->mu);
    if (full)
        atomic_fetch_add(&g->counts->per_ip_refused, 1);
    return full ? MHD_NO : MHD_YES;
}

/* guard_started - conn is live: tracked, its address counted, and shut
 * down at once when that address is over its cap. */
static void guard_started(http_guard *g, struct MHD_Connection *conn, void **socket_context)
{
    const union MHD_ConnectionInfo *fi = MHD_get_connection_info(conn,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    guard_conn *c = calloc(1, sizeof *c);
    if (c == NULL || fi == NULL) {
        /* untracked, it would escape the deadlines: refuse it */
        if (fi)
            shutdown(fi->connect_fd, SHUT_RDWR);
        st_log(ST_LOG_WARN, GUARD, "a connection refused: out of memory");
        free(c);
        return;
    }
    c->fd = fi->connect_fd;
    c->ph = HTTP_GUARD_HEADERS;
    c->since_ns = st_now_ns();
    uint8_t key[GUARD_KEY_BYTES];
    bool ip = ai && guard_key(ai->client_addr,
                              ai->client_addr && ai->client_addr->sa_family == AF_INET6
                                  ? (socklen_t)sizeof(struct sockaddr_in6)
                                  : (socklen_t)sizeof(struct sockaddr_in),
                              key);
    bool over = false;
    pthread_mutex_lock(&g->mu);
    if (ip) {
        guard_addr *a = guard_find(g, key);
        if (a == NULL && (a = calloc(1, sizeof *a)) != NULL) {
            memcpy(a->key, key, GUARD_KEY_BYTES);
            guard_addr **s = guard_slot(g, key);
            a->next = *s;
            *s = a;
        }
        c->addr = a;
        if (a) {
            a->conns++;
            over = g->cfg.per_ip > 0 && a->conns > g->cfg.per_ip;
        } else {
            over = true; /* cannot count it: refuse rather than exceed the cap */
        }
    }
    if (over)
        c->shut = true;
    c->next = g->conns;
    if (g->conns)
        g->conns->prev = c;
    g->conns = c;
    *socket_context = c;
    pthread_mutex_unlock(&g->mu);
    if (over) { /* counted before the client can see the close */
        atomic_fetch_add(&g->counts->per_ip_refused, 1);
        shutdown(c->fd, SHUT_RDWR);
    }
}

/* guard_closed - conn ends (its socket not yet closed by MHD). */
static void guard_closed(http_guard *g, void **socket_context)
{
    guard_conn *c = *socket_context;
    if (c == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    guard_addr *a = c->addr;
    if (a && --a->conns == 0) {
        guard_addr **p = guard_slot(g, a->key);
        while (*p != a)
            p = &(*p)->next;
        *p = a->next;
        free(a);
    }
    pthread_mutex_unlock(&g->mu);
    free(c);
    *socket_context = NULL;
}

void http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode code)
{
    http_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        guard_started(g, conn, socket_context);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        guard_closed(g, socket_context);
}

void http_guard_phase(http_guard *g, struct MHD_Connection *conn, http_guard_ph ph)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci == NULL || ci->socket_context == NULL)
        return;
    guard_conn *c = ci->socket_context;
    uint64_t now = st_now_ns();
    pthread_mutex_lock(&g->mu);
    c->ph = ph;
    c->since_ns = now;
    pthread_mutex_unlock(&g->mu);
}

/* guard_sweep - shuts down every connection past its phase's deadline. */
static void guard_sweep(http_guard *g)
{
    uint64_t hd = (uint64_t)g->cfg.header_s * GUARD_NS_PER_S;
    uint64_t bd = (uint64_t)g->cfg.body_s * GUARD_NS_PER_S;
    uint64_t n_head = 0, n_body = 0;
    pthread_mutex_lock(&g->mu);
    /* read under mu: a phase that began while this thread waited for mu
     * would otherwise be "since" after "now" (and the difference wrap) */
    uint64_t now = st_now_ns();
    for (guard_conn *c = g->conns; c; c = c->next) {
        if (c->shut || c->ph == HTTP_GUARD_ANSWER)
            continue;
        uint64_t limit = c->ph == HTTP_GUARD_HEADERS ? hd : bd;
        if (limit == 0 || now < c->since_ns || now - c->since_ns < limit)
            continue;
        /* counted before the client can see the close; the socket is
         * open: MHD closes it only after its close notice, which waits
         * for mu */
        if (c->ph == HTTP_GUARD_HEADERS) {
            n_head++;
            atomic_fetch_add(&g->counts->header_deadline_closed, 1);
        } else {
            n_body++;
            atomic_fetch_add(&g->counts->body_deadline_closed, 1);
        }
        shutdown(c->fd, SHUT_RDWR);
        c->shut = true;
    }
    pthread_mutex_unlock(&g->mu);
    if (n_head || n_body)
        st_log(ST_LOG_DEBUG, GUARD,
               "closed %llu connections at the header deadline, %llu at the "
               "body deadline",
               (unsigned long long)n_head, (unsigned long long)n_body);
}

static void *guard_main(void *arg)
{
    http_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        pthread_mutex_unlock(&g->mu);
        guard_sweep(g);
        pthread_mutex_lock(&g->mu);
        if (g->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + HTTP_GUARD_TICK_MS * GUARD_NS_PER_MS;
        ts.tv_sec += (time_t)(ns / GUARD_NS_PER_S);
        ts.tv_nsec = (long)(ns % GUARD_NS_PER_S);
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

st_err http_guard_open(const http_guard_cfg *cfg, st_http_guard_counts *counts, http_guard **out)
{
    *out = NULL;
    http_guard *g = calloc(1, sizeof *g);
    if (g == NULL)
        return st_errorf(ST_ENOMEM, "http connection guard");
    g->cfg = *cfg;
    g->counts = counts;
    g->n_heads = 1;
    while (g->n_heads < cfg->max_conns && g->n_heads < GUARD_MAX_BUCKETS)
        g->n_heads *= 2;
    g->heads = calloc(g->n_heads, sizeof *g->heads);
    if (g->heads == NULL) {
        free(g);
        return st_errorf(ST_ENOMEM, "http connection guard: %u buckets", cfg->max_conns);
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (cfg->header_s > 0 || cfg->body_s > 0) {
        if (pthread_create(&g->thr, NULL, guard_main, g) != 0) {
            http_guard_close(g);
            return st_errorf(ST_ENOMEM, "http connection guard thread");
        }
        g->thr_on = true;
    }
    *out = g;
    return ST_OK;
}

void http_guard_close(http_guard *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->thr_on)
        pthread_join(g->thr, NULL);
    while (g->conns) { /* none after MHD_stop_daemon; freed in case */
        guard_conn *c = g->conns;
        g->conns = c->next;
        free(c);
    }
    for (uint32_t i = 0; i < g->n_heads; i++)
        while (g->heads[i]) {
            guard_addr *a = g->heads[i];
            g->heads[i] = a->next;
            free(a);
        }
    free(g->heads);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
