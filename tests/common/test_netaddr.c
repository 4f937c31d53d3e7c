/* test_netaddr.c - the address grammar of common/net/netaddr.h: splitting
 * tcp://HOST:PORT at its last ':' (IPv6 in brackets, an empty host, no
 * port), reading a port (0, 65535, 65536, signs, trailing garbage), the
 * wildcard hosts, the host of any URL, and loopback hosts. */
#include <check.h>
#include <string.h>

#include "common/net/netaddr.h"

/* split_ok - url splits into host and port, exactly. */
static void split_ok(const char *url, const char *host, const char *port)
{
    st_hostport hp;
    ck_assert_msg(st_tcp_split(url, &hp), "'%s' does not split", url);
    ck_assert_uint_eq(hp.host_len, strlen(host));
    ck_assert_msg(strncmp(hp.host, host, hp.host_len) == 0, "'%s': host '%.*s', want '%s'", url,
                  (int)hp.host_len, hp.host, host);
    ck_assert_str_eq(hp.port, port);
    ck_assert(st_tcp_split(url, NULL));
}

START_TEST(tcp_split)
{
    split_ok("tcp://127.0.0.1:5555", "127.0.0.1", "5555");
    split_ok("tcp://example.org:0", "example.org", "0");
    split_ok("tcp://:5555", "", "5555");
    split_ok("tcp://[::1]:5555", "[::1]", "5555");
    split_ok("tcp://[fe80::1%eth0]:80", "[fe80::1%eth0]", "80");
    split_ok("tcp://::1", ":", "1"); /* no brackets: the last ':' still cuts */
    split_ok("tcp://host:", "host", "");
    split_ok("tcp://host:80x", "host", "80x");
    ck_assert(!st_tcp_split("tcp://host", NULL));     /* no port */
    ck_assert(!st_tcp_split("tcp://", NULL));         /* nothing */
    ck_assert(!st_tcp_split("ipc:///tmp/x:1", NULL)); /* another scheme */
    ck_assert(!st_tcp_split("TCP://host:1", NULL));   /* the scheme is lower case */
    ck_assert(!st_tcp_split("tcp:/host:1", NULL));
    ck_assert(!st_tcp_split("host:1", NULL));
    ck_assert(st_is_tcp("tcp://"));
    ck_assert(!st_is_tcp("tcp4://h:1"));
    ck_assert(!st_is_tcp(""));
}
END_TEST

START_TEST(tcp_any_split)
{
    st_hostport hp;
    ck_assert(st_tcp_any_split("tcp://h:1", &hp) && hp.host_len == 1 && strcmp(hp.port, "1") == 0);
    ck_assert(st_tcp_any_split("tcp4://0.0.0.0:0", &hp) && hp.host_len == 7 &&
              strcmp(hp.port, "0") == 0);
    ck_assert(st_tcp_any_split("tcp6://[::]:7", &hp) && hp.host_len == 4 &&
              strncmp(hp.host, "[::]", 4) == 0 && strcmp(hp.port, "7") == 0);
    ck_assert(!st_tcp_any_split("tcp5://h:1", NULL));
    ck_assert(!st_tcp_any_split("ipc:///tmp/x:1", NULL));
    ck_assert(!st_tcp_any_split("tcp4://h", NULL)); /* no port */
    ck_assert(!st_tcp_split("tcp4://h:1", NULL));   /* st_tcp_split: tcp:// alone */
}
END_TEST

START_TEST(hostport_split)
{
    st_hostport hp;
    ck_assert(st_hostport_split("localhost:8080", &hp));
    ck_assert_uint_eq(hp.host_len, 9);
    ck_assert_str_eq(hp.port, "8080");
    ck_assert(st_hostport_split(":8080", &hp));
    ck_assert_uint_eq(hp.host_len, 0);
    ck_assert(st_hostport_split("[::]:1", &hp));
    ck_assert_uint_eq(hp.host_len, 4);
    ck_assert_str_eq(hp.port, "1");
    ck_assert(!st_hostport_split("localhost", &hp));
    ck_assert(!st_hostport_split("", NULL));
}
END_TEST

START_TEST(tcp_host_len)
{
    ck_assert_uint_eq(st_tcp_host_len("tcp://127.0.0.1:0"), 9);
    ck_assert_uint_eq(st_tcp_host_len("tcp://[::1]:7"), 5);
    ck_assert_uint_eq(st_tcp_host_len("tcp://:7"), 0);
    ck_assert_uint_eq(st_tcp_host_len("tcp://noport"), 6);
}
END_TEST

/* port_ok / port_bad - text reads as want in 0..max, or is refused with
 * *out untouched. */
static void port_ok(const char *text, long max, long want)
{
    long v = -7;
    ck_assert_msg(st_port_parse(text, max, &v), "'%s' refused", text);
    ck_assert_int_eq(v, want);
}

static void port_bad(const char *text, long max)
{
    long v = -7;
    ck_assert_msg(!st_port_parse(text, max, &v), "'%s' accepted", text);
    ck_assert_int_eq(v, -7);
}

START_TEST(ports)
{
    port_ok("0", ST_PORT_MAX, 0);
    port_ok("1", ST_PORT_MAX, 1);
    port_ok("65535", ST_PORT_MAX, 65535);
    port_ok("007", ST_PORT_MAX, 7);
    port_ok("-0", ST_PORT_MAX, 0); /* as strtol reads it (see netaddr.h) */
    port_ok("+80", ST_PORT_MAX, 80);
    port_ok(" 80", ST_PORT_MAX, 80);
    port_ok("100", 100, 100);
    port_bad("65536", ST_PORT_MAX);
    port_bad("101", 100);
    port_bad("", ST_PORT_MAX);
    port_bad("-1", ST_PORT_MAX);
    port_bad("80x", ST_PORT_MAX);
    port_bad("80 ", ST_PORT_MAX);
    port_bad("8 0", ST_PORT_MAX);
    port_bad("0x50", ST_PORT_MAX);
    port_bad("x", ST_PORT_MAX);
    port_bad("+", ST_PORT_MAX);
    port_bad(" ", ST_PORT_MAX);
    port_bad("99999999999999999999999", ST_PORT_MAX); /* overflows long */
}
END_TEST

START_TEST(any_hosts)
{
    ck_assert(st_host_is_any("", 0));
    ck_assert(st_host_is_any("0.0.0.0", 7));
    ck_assert(st_host_is_any("*", 1));
    ck_assert(st_host_is_any("[::]", 4));
    ck_assert(st_host_is_any("0.0.0.0:5", 7)); /* only len bytes are read */
    ck_assert(!st_host_is_any("0.0.0.0", 3));
    ck_assert(!st_host_is_any("::", 2));
    ck_assert(!st_host_is_any("127.0.0.1", 9));
    ck_assert(!st_host_is_any("**", 2));
}
END_TEST

/* host_is - the host of url is want. */
static void host_is(const char *url, const char *want)
{
    char h[64];
    ck_assert_msg(st_url_host(url, h, sizeof h), "'%s' has no host", url);
    ck_assert_str_eq(h, want);
}

START_TEST(url_host)
{
    host_is("tcp://127.0.0.1:5555", "127.0.0.1");
    host_is("tcp://[::1]:5555", "::1");
    host_is("tcp://[::1]", "::1");
    host_is("tcp://:0", "");
    host_is("tcp://name", "name");
    host_is("ws://h:80/path:x", "h");
    host_is("tls+tcp://h/p", "h");
    char h[64], small[4];
    ck_assert(!st_url_host("127.0.0.1:5555", h, sizeof h));  /* no scheme */
    ck_assert(!st_url_host("tcp://[::1:5555", h, sizeof h)); /* no ']' */
    ck_assert(!st_url_host("tcp://long:1", small, sizeof small));
    ck_assert(st_url_host("tcp://abc:1", small, sizeof small));
    ck_assert_str_eq(small, "abc");
}
END_TEST

START_TEST(loopback)
{
    ck_assert(st_host_is_loopback("127.0.0.1"));
    ck_assert(st_host_is_loopback("127.255.0.9"));
    ck_assert(st_host_is_loopback("localhost"));
    ck_assert(st_host_is_loopback("LocalHost"));
    ck_assert(st_host_is_loopback("::1"));
    ck_assert(st_host_is_loopback("::ffff:127.0.0.1"));
    ck_assert(!st_host_is_loopback("[::1]")); /* brackets are the URL's, not the host's */
    ck_assert(!st_host_is_loopback("128.0.0.1"));
    ck_assert(!st_host_is_loopback("0.0.0.0"));
    ck_assert(!st_host_is_loopback("::"));
    ck_assert(!st_host_is_loopback("::ffff:10.0.0.1"));
    ck_assert(!st_host_is_loopback(""));
    ck_assert(!st_host_is_loopback("*"));
    ck_assert(!st_host_is_loopback("localhost.example"));
}
END_TEST

START_TEST(any_loopback)
{
    ck_assert_str_eq(st_host_any_loopback("", 0), "127.0.0.1");
    ck_assert_str_eq(st_host_any_loopback("0.0.0.0", 7), "127.0.0.1");
    ck_assert_str_eq(st_host_any_loopback("*", 1), "127.0.0.1");
    ck_assert_str_eq(st_host_any_loopback("[::]", 4), "[::1]");
    ck_assert_ptr_null(st_host_any_loopback("0.0", 3)); /* not a prefix rule */
    ck_assert_ptr_null(st_host_any_loopback("127.0.0.1", 9));
    ck_assert_ptr_null(st_host_any_loopback("[::1]", 5));
}
END_TEST

START_TEST(unbracket)
{
    char h[8];
    ck_assert(st_host_unbracket("[::1]", 5, h, sizeof h));
    ck_assert_str_eq(h, "::1");
    ck_assert(st_host_unbracket("h.x:1", 3, h, sizeof h)); /* len bytes only */
    ck_assert_str_eq(h, "h.x");
    ck_assert(st_host_unbracket("[::1", 4, h, sizeof h)); /* no ']': as written */
    ck_assert_str_eq(h, "[::1");
    ck_assert(st_host_unbracket("", 0, h, sizeof h));
    ck_assert_str_eq(h, "");
    ck_assert(st_host_unbracket("1234567", 7, h, sizeof h));
    ck_assert(!st_host_unbracket("12345678", 8, h, sizeof h));
    ck_assert(st_host_unbracket("[1234567]", 9, h, sizeof h));
}
END_TEST

START_TEST(tcp_format)
{
    char a[32];
    ck_assert(st_tcp_format("127.0.0.1", 9, 5555, a, sizeof a));
    ck_assert_str_eq(a, "tcp://127.0.0.1:5555");
    ck_assert(st_tcp_format("[::1]", 5, 0, a, sizeof a));
    ck_assert_str_eq(a, "tcp://[::1]:0");
    ck_assert(st_tcp_format("::1", 3, 80, a, sizeof a)); /* a bare v6 literal is bracketed */
    ck_assert_str_eq(a, "tcp://[::1]:80");
    ck_assert(st_tcp_format("", 0, ST_PORT_MAX, a, sizeof a));
    ck_assert_str_eq(a, "tcp://:65535");
    ck_assert(st_tcp_format("hostname:9", 8, 1, a, sizeof a)); /* len bytes only */
    ck_assert_str_eq(a, "tcp://hostname:1");
    ck_assert(!st_tcp_format("h", 1, ST_PORT_MAX + 1, a, sizeof a));
    ck_assert(!st_tcp_format("h", 1, -1, a, sizeof a));
    char small[13]; /* "tcp://h:1234" is 12 bytes and its NUL */
    ck_assert(st_tcp_format("h", 1, 1234, small, sizeof small));
    ck_assert(!st_tcp_format("h", 1, 12345, small, sizeof small));
    ck_assert_str_eq(small, "");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("netaddr");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, tcp_split);
    tcase_add_test(tc, tcp_any_split);
    tcase_add_test(tc, hostport_split);
    tcase_add_test(tc, tcp_host_len);
    tcase_add_test(tc, ports);
    tcase_add_test(tc, any_hosts);
    tcase_add_test(tc, url_host);
    tcase_add_test(tc, loopback);
    tcase_add_test(tc, any_loopback);
    tcase_add_test(tc, unbracket);
    tcase_add_test(tc, tcp_format);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
