/* netaddr.c - network addresses: the tcp:// scheme, HOST:PORT, ports,
 * loopback and wildcard hosts (see netaddr.h). */
#include "common/net/netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NA_SCHEME_SEP "://"
#define NA_LOOPBACK_NET 127  /* 127.0.0.0/8 */
#define NA_V4_NET_SHIFT 24   /* the first octet of an IPv4 address in host order */
#define NA_V4MAPPED_FIRST 12 /* the first byte of the IPv4 part of ::ffff:a.b.c.d */

bool st_is_tcp(const char *url) { return strncmp(url, ST_TCP_SCHEME, ST_TCP_SCHEME_LEN) == 0; }

bool st_hostport_split(const char *s, st_hostport *out)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return false;
    if (out != NULL)
        *out = (st_hostport){.host = s, .host_len = (size_t)(colon - s), .port = colon + 1};
    return true;
}

bool st_tcp_split(const char *url, st_hostport *out)
{
    return st_is_tcp(url) && st_hostport_split(url + ST_TCP_SCHEME_LEN, out);
}

bool st_tcp_any_split(const char *url, st_hostport *out)
{
    static const char *const schemes[] = {ST_TCP_SCHEME, "tcp4://", "tcp6://"};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        size_t n = strlen(schemes[i]);
        if (strncmp(url, schemes[i], n) == 0)
            return st_hostport_split(url + n, out);
    }
    return false;
}

size_t st_tcp_host_len(const char *url)
{
    st_hostport hp;
    return st_tcp_split(url, &hp) ? hp.host_len : strlen(url + ST_TCP_SCHEME_LEN);
}

bool st_port_parse(const char *text, long max, long *out)
{
    if (text[0] == '\0')
        return false;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < 0 || v > max)
        return false;
    *out = v;
    return true;
}

bool st_host_is_any(const char *host, size_t len)
{
    static const char *const any[] = {"", "0.0.0.0", "*", "[::]"};
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (len == strlen(any[i]) && strncmp(host, any[i], len) == 0)
            return true;
    return false;
}

const char *st_host_any_loopback(const char *host, size_t len)
{
    static const char v6_any[] = "[::]";
    if (!st_host_is_any(host, len))
        return NULL;
    return len == strlen(v6_any) && strncmp(host, v6_any, len) == 0 ? "[::1]" : "127.0.0.1";
}

bool st_host_unbracket(const char *host, size_t len, char *out, size_t cap)
{
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    if (len >= cap)
        return false;
    memcpy(out, host, len);
    out[len] = '\0';
    return true;
}

bool st_tcp_format(const char *host, size_t len, long port, char *buf, size_t cap)
{
    if (cap == 0)
        return false;
    buf[0] = '\0';
    if (port < 0 || port > ST_PORT_MAX || len > INT_MAX)
        return false;
    bool bracket = memchr(host, ':', len) != NULL && !(len > 0 && host[0] == '[');
    int w = snprintf(buf, cap, ST_TCP_SCHEME "%s%.*s%s:%ld", bracket ? "[" : "", (int)len, host,
                     bracket ? "]" : "", port);
    if (w < 0 || (size_t)w >= cap) {
        buf[0] = '\0';
        return false;
    }
    return true;
}

bool st_url_host(const char *url, char *host, size_t cap)
{
    const char *p = strstr(url, NA_SCHEME_SEP);
    if (p == NULL)
        return false;
    p += strlen(NA_SCHEME_SEP);
    const char *end;
    if (*p == '[') {
        p++;
        end = strchr(p, ']');
        if (end == NULL)
            return false;
    } else {
        end = p + strcspn(p, "/");
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon != NULL)
            end = colon;
    }
    size_t n = (size_t)(end - p);
    if (n >= cap)
        return false;
    memcpy(host, p, n);
    host[n] = '\0';
    return true;
}

bool st_host_is_loopback(const char *host)
{
    if (strcasecmp(host, "localhost") == 0)
        return true;
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> NA_V4_NET_SHIFT) == NA_LOOPBACK_NET;
    struct in6_addr a6;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[NA_V4MAPPED_FIRST] == NA_LOOPBACK_NET;
    }
    return false; /* a name, "*", "" or an unspecified address */
}
