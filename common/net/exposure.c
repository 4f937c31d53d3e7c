/* exposure.c - protected mode: listen addresses without a key (see
 * exposure.h). */
#include "common/net/exposure.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/net/netaddr.h"

#define EXP_HOST_MAX 256
#define EXP_LIST_MAX 512     /* the warning's list of exposed addresses */
#define EXP_DIR_MODE 0700    /* the local key directory: its user only */

bool st_addr_is_local(const char *url)
{
    static const char *const local_schemes[] = {"ipc://", "inproc://", "abstract://", NULL};
    for (int i = 0; local_schemes[i] != NULL; i++)
        if (strncmp(url, local_schemes[i], strlen(local_schemes[i])) == 0)
            return true;
    char host[EXP_HOST_MAX];
    return st_url_host(url, host, sizeof host) && st_host_is_loopback(host);
}

st_err st_listen_check(const char *who, const char *const *flags, const char *const *urls, size_t n,
                       bool keyed, bool insecure)
{
    if (keyed)
        return ST_OK;
    char exposed[EXP_LIST_MAX] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (urls[i] == NULL || st_addr_is_local(urls[i]))
            continue;
        if (!insecure)
            return st_errorf(ST_EINVAL,
                             "%s %s reaches beyond loopback and there is no cluster "
                             "key, so anyone on the network could join and inject frames: give "
                             "--cluster-key FILE (`strata keygen FILE` makes one), or --insecure "
                             "to listen unprotected anyway",
                             flags[i], urls[i]);
        int w = snprintf(exposed + len, sizeof exposed - len, "%s%s %s", len ? ", " : "", flags[i],
                         urls[i]);
        if (w > 0 && (size_t)w < sizeof exposed - len)
            len += (size_t)w;
    }
    if (len > 0)
        st_log(ST_LOG_WARN, who,
               "--insecure: listening beyond loopback without a cluster key "
               "(%s): anyone who can reach it can join, inject frames and read activations",
               exposed);
    return ST_OK;
}

/* exp_tcp_port - the port of a tcp://HOST:PORT url into *port and its
 * host (without brackets) into host; false for another scheme or a port
 * that is not a decimal number in 0..65535. */
static bool exp_tcp_port(const char *url, char host[EXP_HOST_MAX], unsigned long *port)
{
    st_hostport hp;
    long p;
    if (!st_tcp_split(url, &hp) || !st_url_host(url, host, EXP_HOST_MAX) || hp.port[0] < '0' ||
        hp.port[0] > '9' || !st_port_parse(hp.port, ST_PORT_MAX, &p))
        return false;
    *port = (unsigned long)p;
    return true;
}

/* exp_v4_any - whether host is the IPv4 wildcard: empty or 0.0.0.0. */
static bool exp_v4_any(const char *host) { return host[0] == '\0' || strcmp(host, "0.0.0.0") == 0; }

/* exp_v4 - whether host is the IPv4 wildcard or an IPv4 literal. */
static bool exp_v4(const char *host)
{
    struct in_addr a4;
    return exp_v4_any(host) || inet_pton(AF_INET, host, &a4) == 1;
}

int st_listen_clash(const char *url, const char *const *urls, size_t n)
{
    char host[EXP_HOST_MAX], other[EXP_HOST_MAX];
    unsigned long port, oport;
    if (!exp_tcp_port(url, host, &port) || port == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (urls[i] == NULL || !exp_tcp_port(urls[i], other, &oport) || oport != port)
            continue;
        bool wild = (exp_v4_any(host) || exp_v4_any(other)) && exp_v4(host) && exp_v4(other);
        if (wild || strcasecmp(host, other) == 0)
            return (int)i;
    }
    return -1;
}

/* exp_key_dir - the local key directory into out (created when create). */
static st_err exp_key_dir(bool create, char *out, size_t cap)
{
    const char *rt = getenv("XDG_RUNTIME_DIR");
    int n = rt && rt[0] == '/' ? snprintf(out, cap, "%s/strata", rt)
                               : snprintf(out, cap, "/tmp/strata-%u", (unsigned)getuid());
    if (n < 0 || (size_t)n >= cap)
        return st_errorf(ST_ERANGE, "the local key directory's name is too long");
    if (create && mkdir(out, EXP_DIR_MODE) != 0 && errno != EEXIST)
        return st_err_errno(errno, out);
    struct stat st;
    if (lstat(out, &st) != 0)
        return st_err_errno(errno, out);
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & (S_IRWXG | S_IRWXO)))
        return st_errorf(ST_EAUTH,
                         "%s is not a directory of this user's alone (mode %o): the "
                         "local cluster key cannot be kept there",
                         out, (unsigned)(st.st_mode & 0777));
    return ST_OK;
}

st_err st_local_key_path(const char *url, bool create, char *out, size_t cap)
{
    char host[EXP_HOST_MAX];
    st_hostport hp;
    if (!st_tcp_split(url, &hp) || !st_addr_is_local(url) || !st_url_host(url, host, sizeof host) ||
        hp.port[0] == '\0' || strspn(hp.port, "0123456789") != strlen(hp.port))
        return st_errorf(ST_EINVAL, "%s is not a loopback tcp address with a port", url);
    for (char *p = host; *p; p++)
        if (*p == ':' || *p == '/')
            *p = '_'; /* [::1] */
    char dir[EXP_HOST_MAX * 2];
    st_err e = exp_key_dir(create, dir, sizeof dir);
    if (e != ST_OK)
        return e;
    int n = snprintf(out, cap, "%s/coordinator-%s-%s.key", dir, host, hp.port);
    if (n < 0 || (size_t)n >= cap)
        return st_errorf(ST_ERANGE, "the local key file's name is too long");
    return ST_OK;
}

bool st_local_key_find(const char *url, char *out, size_t cap)
{
    if (st_local_key_path(url, false, out, cap) != ST_OK)
        return false;
    return access(out, R_OK) == 0;
}
