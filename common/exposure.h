/* exposure.h - protected mode: what a process may listen on (INV-8).
 *
 * Without a cluster key, nothing listens beyond loopback: a listen address
 * that is not loopback (127.0.0.0/8, ::1, localhost) or local by nature
 * (ipc://, inproc://) is refused with a message naming --cluster-key and
 * --insecure, unless the operator gave --insecure; then the process starts
 * and logs one warning. With a key every frame is authenticated, so any
 * address may be used. Every listener of a process is derived from the
 * addresses its main() passes here (the coordinator's --listen and
 * --results, the worker's --listen, whose host its control socket shares),
 * so one check at start-up covers them all. */
#ifndef ST_EXPOSURE_H
#define ST_EXPOSURE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

/* st_addr_is_local - whether listening on url reaches only this host:
 * tcp (tcp4, tcp6, ws, tls+tcp...) on a literal loopback address or
 * "localhost", or an ipc:// / inproc:// / abstract:// address. A host
 * name, an empty host, 0.0.0.0, * or :: is not local. */
bool st_addr_is_local(const char *url);

/* st_listen_check - n listen addresses, each named by the flag it came
 * from. ST_EINVAL (detail names the flag, --cluster-key and --insecure) when
 * one is not local, there is no key and not insecure; with insecure, one
 * warning (component `who`) naming every exposed address. */
st_err st_listen_check(const char *who, const char *const *flags, const char *const *urls,
                       size_t n, bool keyed, bool insecure);

#endif
