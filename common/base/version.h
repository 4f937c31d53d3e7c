/* version.h - what build a binary is, and which builds interoperate.
 *
 * The build: its release (meson's project version), its commit (`git
 * describe --always --dirty=+` when it was built, "+" meaning uncommitted
 * changes; "unknown" outside a git checkout), its build type (meson's
 * buildtype), the kernel variants compiled in, the ones this CPU runs and
 * the one selected here. Every binary prints them for --version with
 * st_version_print; a worker announces st_version_line() in its Join and
 * `strata status` shows each member's.
 *
 * The protocol. A build speaks protocol ST_PROTO_VERSION and interoperates
 * with peers down to ST_PROTO_OLDEST. The compatibility rule: two members
 * interoperate if and only if each one's version is at least the other's
 * oldest; they then speak the lower of the two versions. A Join without an
 * oldest (0: builds older than the field) speaks its version only. Bump
 * ST_PROTO_VERSION for a change a peer must know about (a field it must
 * read, a changed meaning); a field old peers may ignore needs no bump.
 * Raise ST_PROTO_OLDEST when the support of an old version is removed. A
 * member that cannot interoperate is refused at Join with ST_EVERSION and a
 * detail naming both versions (st_proto_negotiate). */
#ifndef ST_VERSION_H
#define ST_VERSION_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/base/err.h"

/* The protocol this build speaks, and the oldest it interoperates with. */
#define ST_PROTO_VERSION 1u
#define ST_PROTO_OLDEST 1u

/* Bytes of a build's one-line version (st_version_line) a peer may send,
 * without the NUL; longer ones are refused at Join, never cut. */
#define ST_VERSION_LINE_MAX 255

/* st_proto_range - the protocol versions a member interoperates with. */
typedef struct st_proto_range {
    uint32_t oldest;
    uint32_t version;
} st_proto_range;

/* st_proto_ours - {ST_PROTO_OLDEST, ST_PROTO_VERSION}. */
st_proto_range st_proto_ours(void);

/* st_proto_agree - the compatibility rule: whether members of ranges a
 * and b interoperate (each version at least the other's oldest, and each
 * range well formed: 0 < oldest <= version, an oldest of 0 read as the
 * version); *agreed is then the lower version, else 0. */
bool st_proto_agree(st_proto_range a, st_proto_range b, uint32_t *agreed);

/* st_proto_negotiate - the protocol a member of range `peer` (oldest 0:
 * its version only) and this build speak, into *agreed. ST_EVERSION when
 * they cannot interoperate (the rule above) or peer.version is 0, with
 * the detail "protocol P; ROLE speaks V" (each side as "OLDEST..VERSION"
 * when that is a range), followed by " (peer strata PEER_LINE; ROLE strata
 * OUR_LINE)" when peer_line (the peer's st_version_line) is not NULL or
 * empty (at most ST_VERSION_LINE_MAX bytes of it, the most a Join may
 * carry). role names this side ("coordinator"). */
st_err st_proto_negotiate(st_proto_range peer, const char *peer_line, const char *role,
                          uint32_t *agreed);

/* st_version_release - meson's project version ("0.1.0"). */
const char *st_version_release(void);

/* st_version_commit - the commit built ("54f7af8c1e2d", "54f7af8c1e2d+"
 * with uncommitted changes, "unknown" outside a git checkout). */
const char *st_version_commit(void);

/* st_version_buildtype - meson's buildtype ("release", "debug", ...). */
const char *st_version_buildtype(void);

/* st_version_line - "RELEASE (commit COMMIT, BUILDTYPE)", what a worker
 * announces at Join and `strata status` shows (a static string). */
const char *st_version_line(void);

/* st_version_print - the --version text of program prog on f: its line,
 * the protocol range, the kernel variants compiled in, those this CPU and
 * OS run, and the one st_kernels_select(0) picks here (STRATA_KERNELS=ref
 * obeyed). */
void st_version_print(FILE *f, const char *prog);

/* st_version_asked - whether argv[1] is "--version" (every binary's
 * version flag block: print with st_version_print, exit 0). */
bool st_version_asked(int argc, char **argv);

#endif
