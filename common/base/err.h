/* err.h - the one error type of Strata.
 *
 * Every fallible function returns an st_err: 0 (ST_OK) on success, a
 * positive code otherwise, and delivers results through out-parameters.
 * A code says what class of failure happened; the human-readable detail
 * (which key, which tensor, which offset, which epoch) is recorded with
 * st_errorf() into a per-thread buffer and read back with st_errdetail().
 * The detail buffer is diagnostic only: no control flow may depend on it.
 *
 * Errors of the libraries below us (errno, NNG, zstd, libsodium) are
 * wrapped by st_err_errno(), st_err_nng(), st_err_zstd(), st_err_sodium():
 * each maps to one of our codes and keeps the library's own message in the
 * detail, so nothing is lost. */
#ifndef ST_ERR_H
#define ST_ERR_H

#include <stddef.h>

typedef enum st_err {
    ST_OK = 0,
    ST_EINVAL,    /* invalid argument or request */
    ST_ENOMEM,    /* out of memory or over a memory budget */
    ST_EIO,       /* I/O error (errno in detail) */
    ST_ENOENT,    /* file, key, tensor or id not found */
    ST_EFORMAT,   /* malformed input: bad magic, bad encoding */
    ST_EVERSION,  /* unsupported version */
    ST_ETRUNC,    /* input shorter than it claims */
    ST_ERANGE,    /* value or offset out of range */
    ST_EOVERFLOW, /* arithmetic overflow in sizes or dimensions */
    ST_EOVERLAP,  /* overlapping regions (tensor data) */
    ST_ETYPE,     /* unknown or unsupported type / dtype */
    ST_EMISSING,  /* a required key or tensor is missing */
    ST_ESHAPE,    /* shape contradicts hyperparameters or block size */
    ST_ECHECKSUM, /* checksum mismatch */
    ST_EAUTH,     /* authentication (MAC) failure or replay */
    ST_EEPOCH,    /* stale or foreign epoch / plan hash */
    ST_ETIMEOUT,  /* deadline missed */
    ST_EBUSY,     /* no capacity now; try later */
    ST_ECLOSED,   /* object or connection closed */
    ST_EPROTO,    /* protocol violation */
    ST_ENNG,      /* NNG error (NNG's message in detail) */
    ST_EZSTD,     /* zstd error (zstd's message in detail) */
    ST_ESODIUM,   /* libsodium error */
    ST_EINTERNAL, /* a bug: an invariant of ours failed */
    ST_ECANCELED, /* operation canceled */
    ST_ERR_COUNT
} st_err;

/* st_strerror - a static, one-line description of code e (never NULL). */
const char *st_strerror(st_err e);

/* st_errorf - records a formatted detail for the current thread and
 * returns e, so callers write `return st_errorf(ST_ESHAPE, "...", ...)`. */
st_err st_errorf(st_err e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* st_errwrap - puts a formatted context in front of this thread's detail
 * and returns e: after a callee recorded "temp nan must be ...",
 * `return st_errwrap(e, "row %zu", i)` leaves "row 3: temp nan must be
 * ..." (just the context when there was no detail). A detail longer than
 * the buffer keeps its start and ends in "...", never cut silently. */
st_err st_errwrap(st_err e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* st_errdetail - the detail recorded last on this thread ("" if none). */
const char *st_errdetail(void);

/* st_errclear - forgets this thread's detail. */
void st_errclear(void);

/* st_errmsg - "strerror: detail" of e in a per-thread buffer, for logs. */
const char *st_errmsg(st_err e);

/* st_err_errno - wraps errno value en (context names the operation). */
st_err st_err_errno(int en, const char *context);

/* st_err_nng - wraps an NNG return value rv (nonzero). */
st_err st_err_nng(int rv, const char *context);

/* st_err_zstd - wraps a zstd size_t result that ZSTD_isError() flagged. */
st_err st_err_zstd(size_t code, const char *context);

/* st_err_sodium - wraps a failing libsodium call. */
st_err st_err_sodium(const char *context);

#endif
