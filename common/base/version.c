/* version.c - the build's identity and the protocol rule (version.h).
 *
 * The release, build type and commit come from version_build.h, which
 * meson writes at every build (configure_file for the first two, vcs_tag
 * for the commit), so a binary never claims a commit it was not built
 * from. The kernel variants compiled in follow kernels/meson.build: the
 * SIMD libraries are built exactly when the project defines
 * ST_HAVE_X86_SIMD (x86_64 hosts). */
#include "common/base/version.h"

#include <stdbool.h>
#include <string.h>

#include "kernels/kernels.h"
#include "version_build.h"

/* A protocol range as text: "OLDEST..VERSION" of two u32 and the NUL. */
#define VER_RANGE_CAP 24

st_proto_range st_proto_ours(void)
{
    return (st_proto_range){.oldest = ST_PROTO_OLDEST, .version = ST_PROTO_VERSION};
}

/* ver_range - "V" or "OLDEST..V" into out. */
static void ver_range(st_proto_range r, char out[VER_RANGE_CAP])
{
    if (r.oldest == r.version)
        snprintf(out, VER_RANGE_CAP, "%u", r.version);
    else
        snprintf(out, VER_RANGE_CAP, "%u..%u", r.oldest, r.version);
}

/* ver_norm - r with an oldest of 0 read as its version. */
static st_proto_range ver_norm(st_proto_range r)
{
    if (r.oldest == 0)
        r.oldest = r.version;
    return r;
}

bool st_proto_agree(st_proto_range a, st_proto_range b, uint32_t *agreed)
{
    a = ver_norm(a);
    b = ver_norm(b);
    *agreed = 0;
    if (a.version == 0 || b.version == 0 || a.oldest > a.version || b.oldest > b.version ||
        a.version < b.oldest || b.version < a.oldest)
        return false;
    *agreed = a.version < b.version ? a.version : b.version;
    return true;
}

st_err st_proto_negotiate(st_proto_range peer, const char *peer_line, const char *role,
                          uint32_t *agreed)
{
    st_proto_range ours = st_proto_ours();
    if (st_proto_agree(peer, ours, agreed))
        return ST_OK;
    peer = ver_norm(peer);
    char p[VER_RANGE_CAP], o[VER_RANGE_CAP];
    ver_range(peer, p);
    ver_range(ours, o);
    if (peer_line == NULL || peer_line[0] == '\0')
        return st_errorf(ST_EVERSION, "protocol %s; %s speaks %s", p, role, o);
    return st_errorf(ST_EVERSION, "protocol %s; %s speaks %s (peer strata %.*s; %s strata %s)", p,
                     role, o, ST_VERSION_LINE_MAX, peer_line, role, st_version_line());
}

const char *st_version_release(void) { return ST_BUILD_RELEASE; }

const char *st_version_commit(void)
{
    return ST_BUILD_COMMIT; /* vcs_tag's fallback outside git: "unknown" */
}

const char *st_version_buildtype(void) { return ST_BUILD_TYPE; }

const char *st_version_line(void)
{
    return ST_BUILD_RELEASE " (commit " ST_BUILD_COMMIT ", " ST_BUILD_TYPE ")";
}

/* ver_compiled - whether this build holds variant v's table. */
static bool ver_compiled(st_kvariant v)
{
#if defined(ST_HAVE_X86_SIMD)
    return v < ST_KVAR_COUNT;
#else
    return v == ST_KVAR_REF;
#endif
}

void st_version_print(FILE *f, const char *prog)
{
    st_proto_range ours = st_proto_ours();
    fprintf(f, "%s %s\ncommit %s\nbuild %s\nprotocol %u (interoperates with %u..%u)\n", prog,
            st_version_release(), st_version_commit(), st_version_buildtype(), ours.version,
            ours.oldest, ours.version);
    fprintf(f, "kernels compiled:");
    for (st_kvariant v = ST_KVAR_REF; v < ST_KVAR_COUNT; v++)
        if (ver_compiled(v))
            fprintf(f, " %s", st_kvariant_name(v));
    fprintf(f, "; this CPU runs:");
    for (st_kvariant v = ST_KVAR_REF; v < ST_KVAR_COUNT; v++)
        if (ver_compiled(v) && st_kernels_get(v) != NULL)
            fprintf(f, " %s", st_kvariant_name(v));
    fprintf(f, "; selected: %s\n", st_kernels_select(0)->name);
}

bool st_version_asked(int argc, char **argv)
{
    return argc >= 2 && strcmp(argv[1], "--version") == 0;
}
