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

#include "common/base/err.h"

/* st_addr_is_local - whether listening on url reaches only this host:
 * tcp (tcp4, tcp6, ws, tls+tcp...) on a literal loopback address or
 * "localhost", or an ipc:// / inproc:// / abstract:// address. A host
 * name, an empty host, 0.0.0.0, * or :: is not local. */
bool st_addr_is_local(const char *url);

/* st_listen_check - n listen addresses, each named by the flag it came
 * from. ST_EINVAL (detail names the flag, --cluster-key and --insecure) when
 * one is not local, there is no key and not insecure; with insecure, one
 * warning (component `who`) naming every exposed address. */
st_err st_listen_check(const char *who, const char *const *flags, const char *const *urls, size_t n,
                       bool keyed, bool insecure);

/* st_listen_clash - the index among urls[0..n) (NULL entries skipped) of
 * the tcp:// address whose listener holds the port a listener on url
 * needs, so that binding url must fail: the same port (not 0) on the same
 * host as spelled, or where one host is the IPv4 wildcard (empty or
 * 0.0.0.0) and the other an IPv4 literal or that wildcard too. -1 when
 * none does; host names are not resolved (localhost and 127.0.0.1 are
 * not found to clash), so -1 does not promise that the bind succeeds. */
int st_listen_clash(const char *url, const char *const *urls, size_t n);

/* Keyless still means authenticated (issue 12, docs/security.md): a
 * coordinator started without --cluster-key on loopback makes a random
 * cluster key in a file only its user can read, named after its control
 * address, in $XDG_RUNTIME_DIR/strata/ (or /tmp/strata-UID/); local
 * workers and the CLI that reach it without a key read that file, so
 * another local user or a stray process is a stranger too. */

#define ST_LOCAL_KEY_PATH_MAX 512 /* room for a local key file's path */

/* st_local_key_path - the key file of the coordinator at url (a loopback
 * tcp address with a port), creating the directory (mode 0700) when
 * create; ST_EINVAL for another url, ST_EAUTH for a directory another user
 * owns or others may access. */
st_err st_local_key_path(const char *url, bool create, char *out, size_t cap);

/* st_local_key_find - the key file of the coordinator at url when url is
 * local and the file exists (out set, true); false otherwise. */
bool st_local_key_find(const char *url, char *out, size_t cap);

#endif
