/* dm_addr.c - the daemon's addresses: the flags' checks and what is
 * announced to the coordinator (the data and control addresses the other
 * members dial; docs/worker.md, "Flags"). The control socket's
 * listener is dm_rep.c's (dm_rep_open), the data socket's dataplane.c's.
 *
 * The data and control sockets listen on the --listen host (the control
 * one on --control-port, else any port). What is announced is --advertise
 * and --advertise-control when given (a NAT, a port mapping or a proxy
 * such as deploy/testbed.sh's delayers stands between), else the bound
 * addresses, with a loopback host for a wildcard one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/net/netaddr.h"
#include "worker/daemon/dm_internal.h"

_Static_assert(ST_TCP_ADDR_SIZE(DM_HOST_MAX) <= ST_DP_ADDR_MAX,
               "tcp://HOST:PORT of a flag's host fits an address buffer");

/* dm_split_tcp - host and port of tcp://HOST:PORT (HOST may be [v6]). */
static st_err dm_split_tcp(const char *flag, const char *url, char *host, size_t cap, long *port)
{
    st_hostport hp;
    if (!st_tcp_split(url, &hp) || hp.host_len >= cap)
        return st_errorf(ST_EINVAL, "%s '%s': a tcp://HOST:PORT address is required", flag, url);
    if (!st_port_parse(hp.port, ST_DAEMON_PORT_MAX, port))
        return st_errorf(ST_EINVAL, "%s '%s': the port is not a number in 0..%d", flag, url,
                         ST_DAEMON_PORT_MAX);
    memcpy(host, hp.host, hp.host_len);
    host[hp.host_len] = '\0';
    return ST_OK;
}

/* dm_tcp_flag - ST_OK when flag's value url is unset or a tcp://HOST:PORT
 * URL; host[cap] then gets its host (untouched when unset). */
static st_err dm_tcp_flag(const char *flag, const char *url, char *host, size_t cap)
{
    long port;
    if (url == NULL)
        return ST_OK;
    if (!dm_addr_ok(url) || !st_is_tcp(url))
        return st_errorf(ST_EINVAL, "%s '%s' is not a tcp://HOST:PORT URL", flag, url);
    return dm_split_tcp(flag, url, host, cap, &port);
}

st_err dm_addrs_check(st_daemon *d, char host[DM_HOST_MAX], char ahost[DM_HOST_MAX])
{
    st_err e;
    long port;
    char ctl[DM_HOST_MAX];
    if (!dm_addr_ok(d->self.cfg.coordinator))
        return st_errorf(ST_EINVAL, "--coordinator '%s' is not a tcp://, ipc:// or inproc:// URL",
                         d->self.cfg.coordinator ? d->self.cfg.coordinator : "");
    if ((e = dm_tcp_flag("--advertise-control", d->self.cfg.advertise_control, ctl, sizeof ctl)))
        return e;
    if (d->self.cfg.control_port < 0 || d->self.cfg.control_port > ST_DAEMON_PORT_MAX)
        return st_errorf(ST_EINVAL, "--control-port %d is not a port (0..%d)",
                         d->self.cfg.control_port, ST_DAEMON_PORT_MAX);
    if ((e = dm_split_tcp("--listen", d->self.cfg.listen, host, DM_HOST_MAX, &port)))
        return e;
    /* the announced host: --advertise's, else the bound one (loopback for a wildcard) */
    const char *lo = st_host_any_loopback(host, strlen(host));
    snprintf(ahost, DM_HOST_MAX, "%s", lo != NULL ? lo : host);
    return dm_tcp_flag("--advertise", d->self.cfg.advertise, ahost, DM_HOST_MAX);
}

void dm_addrs_announce(st_daemon *d, const char *host, const char *ahost, int dport, int cport)
{
    printf("listening on tcp://%s:%d\ncontrol on tcp://%s:%d\n", host, dport, host, cport);
    fflush(stdout);
    /* ahost (under DM_HOST_MAX bytes) and a bound port fit (the assertion above) */
    if (d->self.cfg.advertise != NULL)
        snprintf(d->self.data_addr, sizeof d->self.data_addr, "%s", d->self.cfg.advertise);
    else
        st_tcp_format(ahost, strlen(ahost), dport, d->self.data_addr, sizeof d->self.data_addr);
    if (d->self.cfg.advertise_control != NULL)
        snprintf(d->self.ctl_addr, sizeof d->self.ctl_addr, "%s", d->self.cfg.advertise_control);
    else
        st_tcp_format(ahost, strlen(ahost), cport, d->self.ctl_addr, sizeof d->self.ctl_addr);
    dm_chunk_advertise(d, ahost);
}
