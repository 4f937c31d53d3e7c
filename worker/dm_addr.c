/* dm_addr.c - the daemon's addresses: the flags' checks, the control
 * socket's listener, and what is announced to the coordinator (the data
 * and control addresses the other members dial; docs/worker.md,
 * "Addresses").
 *
 * The data and control sockets listen on the --listen host (the control
 * one on --control-port, else any port). What is announced is --advertise
 * and --advertise-control when given (a NAT, a port mapping or a proxy
 * such as deploy/testbed.sh's delayers stands between), else the bound
 * addresses, with a loopback host for a wildcard one. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/msg.h"
#include "common/netaddr.h"
#include "worker/dm_internal.h"

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
    if (!dm_addr_ok(d->cfg.coordinator))
        return st_errorf(ST_EINVAL, "--coordinator '%s' is not a tcp://, ipc:// or inproc:// URL",
                         d->cfg.coordinator ? d->cfg.coordinator : "");
    if ((e = dm_tcp_flag("--advertise-control", d->cfg.advertise_control, ctl, sizeof ctl)))
        return e;
    if (d->cfg.control_port < 0 || d->cfg.control_port > ST_DAEMON_PORT_MAX)
        return st_errorf(ST_EINVAL, "--control-port %d is not a port (0..%d)", d->cfg.control_port,
                         ST_DAEMON_PORT_MAX);
    if ((e = dm_split_tcp("--listen", d->cfg.listen, host, DM_HOST_MAX, &port)))
        return e;
    /* the announced host: --advertise's, else the bound one (loopback for a wildcard) */
    if (strcmp(host, "[::]") == 0)
        snprintf(ahost, DM_HOST_MAX, "[::1]");
    else if (st_host_is_any(host, strlen(host)))
        snprintf(ahost, DM_HOST_MAX, "127.0.0.1");
    else
        snprintf(ahost, DM_HOST_MAX, "%s", host);
    return dm_tcp_flag("--advertise", d->cfg.advertise, ahost, DM_HOST_MAX);
}

st_err dm_listen_rep(st_daemon *d, const char *host, int want_port, int *port)
{
    int rv;
    if ((rv = nng_rep0_open(&d->rep)) != 0)
        return st_err_nng(rv, "control socket");
    d->rep_open = true;
    nng_socket_set_ms(d->rep, NNG_OPT_SENDTIMEO, DM_REPLY_TIMEOUT_MS);
    nng_socket_set_size(d->rep, NNG_OPT_RECVMAXSZ, ST_MSG_CONTROL_MAX_FRAME);
    st_pipe_gate_cfg gc = st_pipe_gate_cfg_for("control", ST_MSG_CONTROL_MAX_FRAME, true);
    st_err e = st_pipe_gate_open(d->rep, &gc, &d->rep_gate);
    if (e != ST_OK)
        return e;
    char url[ST_DP_ADDR_MAX];
    snprintf(url, sizeof url, "tcp://%s:%d", host, want_port);
    nng_listener l;
    if ((rv = nng_listener_create(&l, d->rep, url)) != 0 ||
        (rv = nng_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0 ||
        (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, port)) != 0)
        return st_errorf(ST_ENNG, "control listener on %s: %s", url, nng_strerror(rv));
    return ST_OK;
}

void dm_addrs_announce(st_daemon *d, const char *host, const char *ahost, int dport, int cport)
{
    printf("listening on tcp://%s:%d\ncontrol on tcp://%s:%d\n", host, dport, host, cport);
    fflush(stdout);
    if (d->cfg.advertise != NULL)
        snprintf(d->data_addr, sizeof d->data_addr, "%s", d->cfg.advertise);
    else
        snprintf(d->data_addr, sizeof d->data_addr, "tcp://%s:%d", ahost, dport);
    if (d->cfg.advertise_control != NULL)
        snprintf(d->ctl_addr, sizeof d->ctl_addr, "%s", d->cfg.advertise_control);
    else
        snprintf(d->ctl_addr, sizeof d->ctl_addr, "tcp://%s:%d", ahost, cport);
    dm_chunk_advertise(d, ahost);
}
