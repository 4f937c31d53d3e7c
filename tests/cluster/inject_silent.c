/* inject_silent.c - `inject silent LISTEN`: a weights source that accepts
 * connections and requests and never answers (docs/streaming.md, "Sources
 * that do not answer"; tests/cluster/stream.py case silent).
 *
 * Prints "silent on tcp://HOST:PORT" (the bound port when LISTEN asks for
 * port 0), then "request N (B bytes)" for each request it receives, flushed
 * at once so a test counts them while it runs. Runs until killed. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <string.h>

#include "tests/cluster/inject.h"

int inj_silent_main(int argc, char **argv)
{
    if (argc != 3)
        return inj_usage();
    nng_socket s;
    nng_listener l;
    int rv, port = 0;
    if ((rv = nng_rep0_open(&s)) != 0 || (rv = nng_listen(s, argv[2], &l, 0)) != 0 ||
        (rv = nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port)) != 0) {
        fprintf(stderr, "inject silent %s: %s\n", argv[2], nng_strerror(rv));
        return 1;
    }
    const char *colon = strrchr(argv[2], ':');
    int host = colon != NULL ? (int)(colon - argv[2]) : (int)strlen(argv[2]);
    printf("silent on %.*s:%d\n", host, argv[2], port);
    fflush(stdout);
    for (unsigned long n = 1;; n++) {
        nng_msg *m;
        if ((rv = nng_recvmsg(s, &m, 0)) != 0) {
            fprintf(stderr, "inject silent: %s\n", nng_strerror(rv));
            nng_close(s);
            return 1;
        }
        printf("request %lu (%zu bytes)\n", n, nng_msg_len(m));
        fflush(stdout);
        nng_msg_free(m); /* never answered */
    }
}
