/* err.c - error codes, per-thread detail, and wrappers of library errors. */
#include "common/base/err.h"

#include <errno.h>
#include <nng/nng.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <zstd.h>

#define ERR_DETAIL_BYTES 512
#define ERR_MSG_BYTES 640

static _Thread_local char err_detail[ERR_DETAIL_BYTES];
static _Thread_local char err_wrapbuf[ERR_DETAIL_BYTES];
static _Thread_local char err_msgbuf[ERR_MSG_BYTES];

/* the end of a detail cut to fit its buffer */
static const char err_cut[] = "...";

static const char *const err_names[ST_ERR_COUNT] = {
    [ST_OK] = "success",
    [ST_EINVAL] = "invalid argument",
    [ST_ENOMEM] = "out of memory",
    [ST_EIO] = "I/O error",
    [ST_ENOENT] = "not found",
    [ST_EFORMAT] = "malformed input",
    [ST_EVERSION] = "unsupported version",
    [ST_ETRUNC] = "truncated input",
    [ST_ERANGE] = "out of range",
    [ST_EOVERFLOW] = "size overflow",
    [ST_EOVERLAP] = "overlapping data",
    [ST_ETYPE] = "unsupported type",
    [ST_EMISSING] = "missing required item",
    [ST_ESHAPE] = "shape mismatch",
    [ST_ECHECKSUM] = "checksum mismatch",
    [ST_EAUTH] = "authentication failed",
    [ST_EEPOCH] = "epoch mismatch",
    [ST_ETIMEOUT] = "timed out",
    [ST_EBUSY] = "busy",
    [ST_ECLOSED] = "closed",
    [ST_EPROTO] = "protocol error",
    [ST_ENNG] = "NNG error",
    [ST_EZSTD] = "zstd error",
    [ST_ESODIUM] = "libsodium error",
    [ST_EINTERNAL] = "internal error",
    [ST_ECANCELED] = "canceled",
};

const char *st_strerror(st_err e)
{
    if ((int)e < 0 || e >= ST_ERR_COUNT || err_names[e] == NULL)
        return "unknown error";
    return err_names[e];
}

st_err st_errorf(st_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_detail, sizeof err_detail, fmt, ap);
    va_end(ap);
    return e;
}

st_err st_errwrap(st_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_wrapbuf, sizeof err_wrapbuf, fmt, ap);
    va_end(ap);
    if (n < 0) /* an encoding error in the context: the old detail stays */
        return e;
    size_t used = (size_t)n;
    if (used < sizeof err_wrapbuf && err_detail[0] != '\0') {
        n = snprintf(err_wrapbuf + used, sizeof err_wrapbuf - used, ": %s", err_detail);
        if (n < 0)
            return e;
        used += (size_t)n;
    }
    if (used >= sizeof err_wrapbuf)
        memcpy(err_wrapbuf + sizeof err_wrapbuf - sizeof err_cut, err_cut, sizeof err_cut);
    memcpy(err_detail, err_wrapbuf, sizeof err_detail);
    return e;
}

const char *st_errdetail(void) { return err_detail; }

void st_errclear(void) { err_detail[0] = '\0'; }

const char *st_errmsg(st_err e)
{
    if (err_detail[0])
        snprintf(err_msgbuf, sizeof err_msgbuf, "%s: %s", st_strerror(e), err_detail);
    else
        snprintf(err_msgbuf, sizeof err_msgbuf, "%s", st_strerror(e));
    return err_msgbuf;
}

st_err st_err_errno(int en, const char *context)
{
    st_err e;
    switch (en) {
    case ENOENT:
        e = ST_ENOENT;
        break;
    case ENOMEM:
        e = ST_ENOMEM;
        break;
    case EINVAL:
        e = ST_EINVAL;
        break;
    case ETIMEDOUT:
        e = ST_ETIMEOUT;
        break;
    case EAGAIN:
        e = ST_EBUSY;
        break;
    case ERANGE:
        e = ST_ERANGE;
        break;
    default:
        e = ST_EIO;
        break;
    }
    return st_errorf(e, "%s: %s (errno %d)", context, strerror(en), en);
}

st_err st_err_nng(int rv, const char *context)
{
    st_err e;
    switch (rv) {
    case NNG_ENOMEM:
        e = ST_ENOMEM;
        break;
    case NNG_ETIMEDOUT:
        e = ST_ETIMEOUT;
        break;
    case NNG_ECLOSED:
        e = ST_ECLOSED;
        break;
    case NNG_ECANCELED:
        e = ST_ECANCELED;
        break;
    case NNG_EINVAL:
        e = ST_EINVAL;
        break;
    case NNG_EPROTO:
        e = ST_EPROTO;
        break;
    case NNG_EAGAIN:
        e = ST_EBUSY;
        break;
    default:
        e = ST_ENNG;
        break;
    }
    return st_errorf(e, "%s: %s (nng %d)", context, nng_strerror(rv), rv);
}

st_err st_err_zstd(size_t code, const char *context)
{
    return st_errorf(ST_EZSTD, "%s: %s", context, ZSTD_getErrorName(code));
}

st_err st_err_sodium(const char *context) { return st_errorf(ST_ESODIUM, "%s failed", context); }
