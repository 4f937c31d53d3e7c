/* netaddr.h - network addresses as flags and messages write them: the one
 * home of the tcp:// scheme, of splitting HOST:PORT, of reading a port, and
 * of telling a loopback or wildcard host.
 *
 * Grammar. A TCP address is "tcp://" HOST ":" PORT. It is split at its
 * LAST ':', so a bracketed IPv6 host ("tcp://[::1]:5555") keeps its
 * colons and its brackets in HOST; HOST may be empty (":5555", "tcp://:0":
 * every interface, as NNG reads it). PORT is read by st_port_parse. The
 * functions here only cut text and compare it: none resolves a name or
 * opens a socket, and none allocates; a host returned as a (pointer,
 * length) pair points into the caller's string, which must outlive it.
 *
 * What is not here: the rule of which addresses a process may listen on
 * without a key (common/net/exposure.h, which reads hosts through here), and
 * each flag's own error message (the callers' words stay theirs). */
#ifndef ST_NETADDR_H
#define ST_NETADDR_H

#include <stdbool.h>
#include <stddef.h>

/* The one scheme of TCP addresses, and its length. */
#define ST_TCP_SCHEME "tcp://"
#define ST_TCP_SCHEME_LEN (sizeof ST_TCP_SCHEME - 1)

/* The default listen address of every daemon: loopback, a port the kernel
 * chooses (the bound address is what a daemon announces). */
#define ST_TCP_LOOPBACK_ANY "tcp://127.0.0.1:0"

/* The largest TCP port. */
#define ST_PORT_MAX 65535

/* HOST:PORT cut at the last ':'. */
typedef struct st_hostport {
    const char *host; /* HOST as written ([v6] with its brackets); not NUL-terminated */
    size_t host_len;  /* 0 for ":PORT" */
    const char *port; /* the text after the last ':', to the end ("" possible) */
} st_hostport;

/* st_is_tcp - whether url begins with tcp://. */
bool st_is_tcp(const char *url);

/* st_hostport_split - s cut at its last ':' into *out (may be NULL: only
 * the answer); false when s has no ':'. Neither part is checked: HOST may
 * be empty, PORT empty or not a number (st_port_parse judges it). */
bool st_hostport_split(const char *s, st_hostport *out);

/* st_tcp_split - url as tcp://HOST:PORT: the text after the scheme split
 * as st_hostport_split does into *out (may be NULL); false when url does
 * not begin with tcp:// or has no ':' after it. */
bool st_tcp_split(const char *url, st_hostport *out);

/* st_tcp_any_split - st_tcp_split for any of NNG's TCP schemes: tcp://,
 * tcp4:// (IPv4 only) and tcp6:// (IPv6 only); false for another scheme.
 * For what is announced as tcp://HOST:PORT whatever scheme it listens on. */
bool st_tcp_any_split(const char *url, st_hostport *out);

/* st_tcp_host_len - the length of the HOST of tcp://HOST[:PORT]: the text
 * after the scheme up to its last ':', all of it when it has none. url
 * must begin with tcp:// (st_is_tcp). */
size_t st_tcp_host_len(const char *url);

/* st_port_parse - text as a port in 0..max into *out. text must be a
 * non-empty decimal number as strtol(3) reads it (leading blanks and one
 * sign are allowed, "-0" is 0) with nothing after it; false (out
 * unchanged) for anything else: "", "80x", "65536" when max is
 * ST_PORT_MAX, an overflow of long. */
bool st_port_parse(const char *text, long max, long *out);

/* st_host_is_any - whether HOST (len bytes, as written in an address) is
 * a wildcard of every interface: "", "0.0.0.0", "*" or "[::]". */
bool st_host_is_any(const char *host, size_t len);

/* st_host_any_loopback - the loopback host that reaches a process
 * listening on the wildcard HOST (len bytes, as written): "[::1]" for
 * "[::]", "127.0.0.1" for the other wildcards (st_host_is_any); NULL when
 * HOST is not a wildcard. What a daemon announces for a wildcard listen. */
const char *st_host_any_loopback(const char *host, size_t len);

/* st_host_unbracket - HOST (len bytes, as written) into host (cap bytes,
 * NUL-terminated) without the brackets of "[v6]" (stripped only when HOST
 * both begins with '[' and ends with ']'); false when what remains has cap
 * bytes or more. */
bool st_host_unbracket(const char *host, size_t len, char *out, size_t cap);

/* st_tcp_format - "tcp://HOST:PORT" into buf (cap bytes, NUL-terminated):
 * HOST is host's len bytes as written, put in brackets when it holds a ':'
 * and is not already bracketed (an IPv6 literal). The one writer of tcp://
 * addresses. false (buf then holds no address) when port is not in
 * 0..ST_PORT_MAX or the address does not fit in cap bytes. */
bool st_tcp_format(const char *host, size_t len, long port, char *buf, size_t cap);

/* ST_TCP_ADDR_SIZE - the bytes (NUL included) st_tcp_format needs at most
 * for a host of under host_size bytes and any port: a buffer this large
 * never makes it fail but for the port. */
#define ST_TCP_ADDR_SIZE(host_size) ((host_size) - 1 + sizeof ST_TCP_SCHEME "[]:65535")

/* st_url_host - the HOST of SCHEME://HOST[:PORT][/PATH] into host (cap
 * bytes), without the brackets of "[v6]"; false when url has no "://", a
 * '[' without its ']', or a host of cap bytes or more. */
bool st_url_host(const char *url, char *host, size_t cap);

/* st_host_is_loopback - whether host (without brackets) reaches only this
 * machine: "localhost" in any case, 127.0.0.0/8, ::1, or ::ffff:127.x.y.z.
 * A name, "", "*" or an unspecified address is not. */
bool st_host_is_loopback(const char *host);

#endif
