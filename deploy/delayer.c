/* delayer.c - strata-delayer: a TCP forwarding proxy adding a fixed one-way
 * delay to each direction of every connection, for deploy/testbed.sh on
 * kernels without sch_netem (it models netem on each host's egress: bytes
 * leaving host A wait A's delay).
 *
 *   strata-delayer --listen HOST:PORT --to HOST:PORT [--delay-ms MS]
 *                  [--peer-delay IP=MS]...
 *
 * Contract:
 * - listens on HOST:PORT (IPv4 dotted quad, PORT 0 = any); once listening
 *   prints one line `delaying on HOST:PORT` (the actual port), flushed;
 * - each accepted connection gets its own connection to --to; a failure
 *   closes the client, logs one line on stderr, and serving goes on;
 * - client -> target bytes are released the --peer-delay of the client's
 *   source IP (0 when not listed) after they were read; target -> client
 *   bytes --delay-ms (default 0) after. MS: a non-negative decimal <= 10000;
 *   a bad value, an unknown flag or a missing --listen/--to: a message on
 *   stderr and exit 2;
 * - order is kept per direction; an EOF read from one side is passed on as
 *   shutdown(SHUT_WR) after the same delay (after all earlier bytes); a pair
 *   is closed when both directions are done or on any error of either side;
 * - SIGPIPE is ignored; SIGTERM/SIGINT end the process with status 0.
 *
 * Design: one thread, ppoll() over non-blocking sockets (TCP_NODELAY on
 * both). A direction is a FIFO of chunks (release time on CLOCK_MONOTONIC,
 * bytes, write offset; a zero-length chunk is the EOF); reads take up to
 * 64 KiB; a direction holding more than 16 MiB is not read until it drains
 * (backpressure). The poll timeout is the time to the earliest due chunk.
 *
 * Ownership: the pair array owns the pairs; a pair owns its two sockets and
 * its chunks, all released by dl_pair_close (which marks it dead; the main
 * loop frees dead pairs between polls, so a pointer stays valid for the rest
 * of an iteration). Remote input never aborts: an error closes one pair. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    DL_READ_MAX = 64 * 1024,  /* bytes per read() */
    DL_EXIT_USAGE = 2,        /* bad command line */
    DL_LISTEN_BACKLOG = 128,  /* listen() queue */
    DL_PORT_MAX = 65535,      /* highest TCP port */
    DL_ADDR_TEXT = 32,        /* "255.255.255.255:65535" and its NUL */
    DL_INITIAL_PAIRS = 64,    /* the table's first capacity (it doubles) */
    DL_NS_PER_MS = 1000000,   /* nanoseconds per millisecond */
    DL_NS_PER_S = 1000000000, /* nanoseconds per second */
};
static const size_t DL_QUEUE_MAX = (size_t)16 << 20;   /* stop reading above this */
static const double DL_DELAY_MAX_MS = 10000.0;         /* the largest --delay-ms */
static const int64_t DL_ACCEPT_BACKOFF_NS = 100000000; /* pause after accept fails */
static const char DL_DECIMAL_CHARS[] = "0123456789.";  /* an MS value's characters */

typedef struct dl_chunk {
    struct dl_chunk *next;
    int64_t due_ns;  /* release time, CLOCK_MONOTONIC */
    size_t len, off; /* len 0: the EOF, passed on as shutdown(SHUT_WR) */
    unsigned char data[];
} dl_chunk;

typedef struct {
    dl_chunk *head, *tail;
    size_t queued;    /* bytes in the chunks */
    int64_t delay_ns; /* how long a read chunk waits */
    bool eof_read;    /* EOF read from the source: read no more */
    bool done;        /* the EOF passed on to the destination */
} dl_dir;

/* side 0: the client, 1: the target; dir[d] runs from fd[d] to fd[1 - d] */
typedef struct {
    int fd[2];
    bool connecting; /* fd[1]'s connect() in progress */
    bool dead;
    dl_dir dir[2];
    char peer[DL_ADDR_TEXT];
} dl_pair;

typedef struct {
    struct in_addr ip;
    int64_t delay_ns;
} dl_peer_delay;

typedef struct {
    struct sockaddr_in listen, to;
    int64_t delay_ns;     /* target -> client */
    dl_peer_delay *peers; /* client -> target, by the client's IP */
    int npeers;
} dl_config;

typedef struct {
    dl_pair *p;
    int side;
} dl_slot;

/* the pairs and the poll set: pfd[0] is the listener, then up to 2 per pair
 * (slot[i]: pfd[i]'s pair and side) */
typedef struct {
    dl_pair **pairs;
    struct pollfd *pfd;
    dl_slot *slot;
    int n, cap;
} dl_table;

static volatile sig_atomic_t dl_stop;
static unsigned char dl_buf[DL_READ_MAX];

static void dl_on_signal(int sig) { (void)sig, dl_stop = 1; }

static int64_t dl_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* cannot fail for CLOCK_MONOTONIC */
    return (int64_t)t.tv_sec * DL_NS_PER_S + t.tv_nsec;
}

static const char dl_synopsis[] =
    "usage: strata-delayer --listen HOST:PORT --to HOST:PORT [--delay-ms MS] [--peer-delay "
    "IP=MS]...\n";

static int dl_usage(const char *what, const char *value)
{
    fprintf(stderr, "strata-delayer: %s%s%s\n%s", what, value ? ": " : "", value ? value : "",
            dl_synopsis);
    return DL_EXIT_USAGE;
}

/* dl_help_asked - "--help" anywhere in argv (no value of ours is that). A
 * test-bed tool without the common library: it keeps its own small parser
 * rather than common/base/opt.h's tables (deploy/meson.build links it alone). */
static bool dl_help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}

/* dl_parse_ms - MS (digits with at most one '.', <= 10000) as ns; -1 if bad */
static int dl_parse_ms(const char *s, int64_t *ns)
{
    const char *dot = strchr(s, '.');
    char *end;
    if (!*s || strspn(s, DL_DECIMAL_CHARS) != strlen(s) || (dot && strchr(dot + 1, '.')) ||
        strcmp(s, ".") == 0)
        return -1;
    double v = strtod(s, &end);
    if (*end || v > DL_DELAY_MAX_MS)
        return -1;
    *ns = (int64_t)(v * DL_NS_PER_MS + 0.5);
    return 0;
}

/* dl_parse_addr - IPv4 "A.B.C.D:PORT"; -1 if bad (or port 0 when !any_port) */
static int dl_parse_addr(const char *s, struct sockaddr_in *a, bool any_port)
{
    char host[DL_ADDR_TEXT], *end;
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof(host) || !colon[1])
        return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = 0;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (*end || errno || colon[1] == '-' || port > DL_PORT_MAX || (port == 0 && !any_port))
        return -1;
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

static void dl_pair_close(dl_pair *p)
{
    for (int i = 0; i < 2; i++) {
        if (p->fd[i] >= 0 && close(p->fd[i]) != 0)
            fprintf(stderr, "strata-delayer: %s: close: %s\n", p->peer, strerror(errno));
        p->fd[i] = -1;
        for (dl_chunk *c = p->dir[i].head, *n; c; c = n) {
            n = c->next;
            free(c);
        }
        p->dir[i].head = p->dir[i].tail = NULL;
        p->dir[i].queued = 0;
    }
    p->dead = true;
}

/* dl_read - one read from fd[d] queued on dir[d], due its delay after the
 * read returned (never earlier: the delay is a floor); -1: close the pair */
static int dl_read(dl_pair *p, int d)
{
    dl_dir *dir = &p->dir[d];
    ssize_t n = read(p->fd[d], dl_buf, sizeof(dl_buf));
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        fprintf(stderr, "strata-delayer: %s: read from %s: %s\n", p->peer, d ? "target" : "client",
                strerror(errno));
        return -1;
    }
    dl_chunk *c = malloc(sizeof(*c) + (size_t)n);
    if (!c) {
        fprintf(stderr, "strata-delayer: %s: out of memory for %zd bytes\n", p->peer, n);
        return -1;
    }
    *c = (dl_chunk){.due_ns = dl_now_ns() + dir->delay_ns, .len = (size_t)n};
    memcpy(c->data, dl_buf, (size_t)n);
    if (dir->tail)
        dir->tail->next = c;
    else
        dir->head = c;
    dir->tail = c;
    dir->queued += (size_t)n;
    dir->eof_read = n == 0;
    return 0;
}

/* dl_flush - writes dir[d]'s due chunks to fd[1 - d]; -1: close the pair */
static int dl_flush(dl_pair *p, int d, int64_t now)
{
    dl_dir *dir = &p->dir[d];
    int dst = p->fd[1 - d];
    while (dir->head && dir->head->due_ns <= now && !p->connecting) {
        dl_chunk *c = dir->head;
        if (c->len == 0) {
            if (shutdown(dst, SHUT_WR) != 0) {
                fprintf(stderr, "strata-delayer: %s: shutdown: %s\n", p->peer, strerror(errno));
                return -1;
            }
            dir->done = true;
        } else {
            ssize_t n = send(dst, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return 0;
            if (n < 0) {
                fprintf(stderr, "strata-delayer: %s: write to %s: %s\n", p->peer,
                        d ? "client" : "target", strerror(errno));
                return -1;
            }
            c->off += (size_t)n;
            dir->queued -= (size_t)n;
            if (c->off < c->len)
                return 0;
        }
        dir->head = c->next;
        if (!dir->head)
            dir->tail = NULL;
        free(c);
    }
    return 0;
}

static int dl_nodelay(int fd)
{
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* dl_open - a new pair for client fd c connecting to the target; NULL (c closed) on failure */
static dl_pair *dl_open(int c, const struct sockaddr_in *from, const dl_config *cfg)
{
    char ip[INET_ADDRSTRLEN] = "?";
    if (!inet_ntop(AF_INET, &from->sin_addr, ip, sizeof(ip)))
        fprintf(stderr, "strata-delayer: inet_ntop: %s\n", strerror(errno));
    dl_pair *p = calloc(1, sizeof(*p));
    if (!p) {
        fprintf(stderr, "strata-delayer: %s: out of memory for a connection\n", ip);
        if (close(c) != 0)
            fprintf(stderr, "strata-delayer: %s: close: %s\n", ip, strerror(errno));
        return NULL;
    }
    snprintf(p->peer, sizeof(p->peer), "%s:%u", ip, ntohs(from->sin_port));
    p->fd[0] = c;
    p->dir[1].delay_ns = cfg->delay_ns;
    for (int i = 0; i < cfg->npeers; i++)
        if (cfg->peers[i].ip.s_addr == from->sin_addr.s_addr)
            p->dir[0].delay_ns = cfg->peers[i].delay_ns;
    const char *step = "socket";
    p->fd[1] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd[1] >= 0) {
        step = "TCP_NODELAY";
        if (dl_nodelay(c) == 0 && dl_nodelay(p->fd[1]) == 0) {
            step = "connect to target";
            if (connect(p->fd[1], (const struct sockaddr *)&cfg->to, sizeof(cfg->to)) == 0)
                return p;
            if (errno == EINPROGRESS) {
                p->connecting = true;
                return p;
            }
        }
    }
    fprintf(stderr, "strata-delayer: %s: %s: %s\n", p->peer, step, strerror(errno));
    dl_pair_close(p);
    free(p);
    return NULL;
}

/* dl_connected - fd[1]'s connect() ended: 0 connected, -1 failed (logged) */
static int dl_connected(dl_pair *p)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(p->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err) {
        fprintf(stderr, "strata-delayer: %s: connect to target: %s\n", p->peer, strerror(err));
        return -1;
    }
    p->connecting = false;
    return 0;
}

static bool dl_wants_read(const dl_pair *p, int s)
{
    return !p->dir[s].eof_read && p->dir[s].queued <= DL_QUEUE_MAX && !(s == 1 && p->connecting);
}

/* dl_grow - doubles the table's capacity; -1 (the table unchanged in size) when out of memory */
static int dl_grow(dl_table *t)
{
    int cap = t->cap ? 2 * t->cap : DL_INITIAL_PAIRS;
    size_t nfds = 2 * (size_t)cap + 1;
    dl_pair **pairs = realloc(t->pairs, (size_t)cap * sizeof(*pairs));
    if (!pairs)
        return -1;
    t->pairs = pairs;
    struct pollfd *pfd = realloc(t->pfd, nfds * sizeof(*pfd));
    if (!pfd)
        return -1;
    t->pfd = pfd;
    dl_slot *slot = realloc(t->slot, nfds * sizeof(*slot));
    if (!slot)
        return -1;
    t->slot = slot;
    t->cap = cap;
    return 0;
}

/* dl_accept - accepts what the listener holds; returns when it would block
 * or a failure asks for a pause (then *accept_at is set) */
static void dl_accept(dl_table *t, int lfd, const dl_config *cfg, int64_t now, int64_t *accept_at)
{
    for (;;) {
        struct sockaddr_in from;
        socklen_t flen = sizeof(from);
        if (t->n == t->cap && dl_grow(t) != 0) {
            fprintf(stderr, "strata-delayer: out of memory for %d connections\n", t->n + 1);
            *accept_at = now + DL_ACCEPT_BACKOFF_NS;
            return;
        }
        int c = accept4(lfd, (struct sockaddr *)&from, &flen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0 && errno == ECONNABORTED)
            continue;
        if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                fprintf(stderr, "strata-delayer: accept: %s\n", strerror(errno));
                *accept_at = now + DL_ACCEPT_BACKOFF_NS;
            }
            return;
        }
        dl_pair *p = dl_open(c, &from, cfg);
        if (p)
            t->pairs[t->n++] = p;
    }
}

/* dl_parse_args - the command line into cfg (cfg->peers allocated); DL_EXIT_USAGE if bad */
static int dl_parse_args(int argc, char **argv, dl_config *cfg)
{
    bool have_listen = false, have_to = false;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(f, "--listen") && strcmp(f, "--to") && strcmp(f, "--delay-ms") &&
            strcmp(f, "--peer-delay"))
            return dl_usage("unknown argument", f);
        if (!v)
            return dl_usage("missing value after", f);
        i++;
        if (strcmp(f, "--listen") == 0) {
            if (dl_parse_addr(v, &cfg->listen, true) != 0)
                return dl_usage("--listen: not an IPv4 HOST:PORT", v);
            have_listen = true;
        } else if (strcmp(f, "--to") == 0) {
            if (dl_parse_addr(v, &cfg->to, false) != 0)
                return dl_usage("--to: not an IPv4 HOST:PORT (port 1..65535)", v);
            have_to = true;
        } else if (strcmp(f, "--delay-ms") == 0) {
            if (dl_parse_ms(v, &cfg->delay_ns) != 0)
                return dl_usage("--delay-ms: not a decimal in 0..10000", v);
        } else {
            char ip[INET_ADDRSTRLEN];
            const char *eq = strchr(v, '=');
            dl_peer_delay *pd = &cfg->peers[cfg->npeers];
            if (!eq || (size_t)(eq - v) >= sizeof(ip))
                return dl_usage("--peer-delay: expected IPv4=MS", v);
            memcpy(ip, v, (size_t)(eq - v));
            ip[eq - v] = 0;
            if (inet_pton(AF_INET, ip, &pd->ip) != 1 || dl_parse_ms(eq + 1, &pd->delay_ns) != 0)
                return dl_usage("--peer-delay: expected IPv4=MS, MS a decimal in 0..10000", v);
            cfg->npeers++;
        }
    }
    if (!have_listen || !have_to)
        return dl_usage(have_listen ? "--to is required" : "--listen is required", NULL);
    return 0;
}

/* dl_signals - SIGPIPE ignored, SIGTERM/SIGINT blocked but for ppoll (*run: its mask) */
static int dl_signals(sigset_t *run)
{
    struct sigaction sa = {.sa_handler = SIG_IGN};
    sigset_t block;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    if (sigaction(SIGPIPE, &sa, NULL) != 0 || sigprocmask(SIG_BLOCK, &block, run) != 0)
        return -1;
    sigdelset(run, SIGTERM);
    sigdelset(run, SIGINT);
    sa.sa_handler = dl_on_signal;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    return 0;
}

/* dl_listen - the listening socket, its "delaying on" line printed; -1 on failure */
static int dl_listen(struct sockaddr_in *la)
{
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t alen = sizeof(*la);
    char ip[INET_ADDRSTRLEN];
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lfd, (struct sockaddr *)la, sizeof(*la)) != 0 || listen(lfd, DL_LISTEN_BACKLOG) != 0 ||
        getsockname(lfd, (struct sockaddr *)la, &alen) != 0 ||
        !inet_ntop(AF_INET, &la->sin_addr, ip, sizeof(ip))) {
        fprintf(stderr, "strata-delayer: listen: %s\n", strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return -1;
    }
    printf("delaying on %s:%u\n", ip, ntohs(la->sin_port));
    if (fflush(stdout) != 0)
        fprintf(stderr, "strata-delayer: stdout: %s\n", strerror(errno));
    return lfd;
}

/* dl_poll_set - flushes what is due, closes and frees finished pairs, fills
 * t->pfd; returns the number of pollfds, *next the earliest future due time */
static int dl_poll_set(dl_table *t, int lfd, int64_t now, int64_t accept_at, int64_t *next)
{
    int live = 0, npfd = 1;
    *next = now < accept_at ? accept_at : INT64_MAX;
    for (int i = 0; i < t->n; i++) {
        dl_pair *p = t->pairs[i];
        for (int d = 0; d < 2 && !p->dead; d++)
            if (dl_flush(p, d, now) != 0)
                dl_pair_close(p);
        if (!p->dead && p->dir[0].done && p->dir[1].done)
            dl_pair_close(p);
        if (p->dead) {
            free(p);
            continue;
        }
        t->pairs[live++] = p;
        for (int s = 0; s < 2; s++) {
            const dl_chunk *h = p->dir[1 - s].head; /* bound for fd[s] */
            short ev = dl_wants_read(p, s) ? POLLIN : 0;
            if ((h && h->due_ns <= now) || (s == 1 && p->connecting))
                ev |= POLLOUT;
            if (h && h->due_ns > now && h->due_ns < *next)
                *next = h->due_ns;
            if (ev) {
                t->pfd[npfd] = (struct pollfd){.fd = p->fd[s], .events = ev};
                t->slot[npfd++] = (dl_slot){p, s};
            }
        }
    }
    t->n = live;
    t->pfd[0] = (struct pollfd){.fd = now >= accept_at ? lfd : -1, .events = POLLIN};
    return npfd;
}

int main(int argc, char **argv)
{
    if (dl_help_asked(argc, argv)) {
        fputs(dl_synopsis, stdout);
        return 0;
    }
    dl_config cfg = {.peers = calloc((size_t)argc, sizeof(dl_peer_delay))};
    dl_table t = {0};
    sigset_t run;
    int lfd = -1, status = 1;
    int64_t accept_at = 0;
    if (!cfg.peers || dl_grow(&t) != 0) {
        fprintf(stderr, "strata-delayer: out of memory\n");
        goto out;
    }
    if ((status = dl_parse_args(argc, argv, &cfg)) != 0)
        goto out;
    status = 1;
    if (dl_signals(&run) != 0) {
        fprintf(stderr, "strata-delayer: signals: %s\n", strerror(errno));
        goto out;
    }
    if ((lfd = dl_listen(&cfg.listen)) < 0)
        goto out;
    status = 0;
    while (!dl_stop) {
        int64_t now = dl_now_ns(), next;
        int npfd = dl_poll_set(&t, lfd, now, accept_at, &next);
        struct timespec wait = {0, 0};
        if (next > now && next != INT64_MAX)
            wait = (struct timespec){(next - now) / DL_NS_PER_S, (next - now) % DL_NS_PER_S};
        if (ppoll(t.pfd, (nfds_t)npfd, next == INT64_MAX ? NULL : &wait, &run) < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "strata-delayer: poll: %s\n", strerror(errno));
            status = 1;
            break;
        }
        for (int i = 1; i < npfd; i++) {
            dl_pair *p = t.slot[i].p;
            int s = t.slot[i].side;
            if (!t.pfd[i].revents || p->dead)
                continue;
            if (s == 1 && p->connecting) {
                if (dl_connected(p) != 0)
                    dl_pair_close(p);
            } else if ((t.pfd[i].events & POLLIN) && (t.pfd[i].revents & ~POLLOUT) &&
                       dl_read(p, s) != 0) {
                dl_pair_close(p);
            }
        }
        if (t.pfd[0].revents)
            dl_accept(&t, lfd, &cfg, dl_now_ns(), &accept_at);
    }
out:
    for (int i = 0; i < t.n; i++) {
        dl_pair_close(t.pairs[i]);
        free(t.pairs[i]);
    }
    free(t.pairs), free(t.pfd), free(t.slot), free(cfg.peers);
    if (lfd >= 0 && close(lfd) != 0)
        fprintf(stderr, "strata-delayer: close: %s\n", strerror(errno));
    return status;
}
