/* chain.c - generate with libstrata over a chain of shard servers.
 *
 *   strata-worker --standalone --layers 0:3 --model M.gguf   # prints its address
 *   strata-worker --standalone --layers 3:6 --model M.gguf
 *   chain M.gguf "Once upon a time" tcp://127.0.0.1:P1 tcp://127.0.0.1:P2
 *
 * Build against the installed library: cc chain.c $(pkg-config --cflags --libs strata) */
#include <stdio.h>
#include <stdlib.h>
#include <strata.h>

/* print_token - the token callback: print its text as it comes. */
static int print_token(void *arg, int32_t id, const char *text, size_t len)
{
    (void)arg;
    (void)id;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0; /* nonzero would stop the generation */
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL PROMPT SHARD [SHARD...]\n", argv[0]);
        return 2;
    }
    strata_chain_config cfg = {.model = argv[1],
                               .shards = (const char *const *)argv + 3,
                               .n_shards = (size_t)(argc - 3)};
    char err[512];
    strata_chain *c;
    if (strata_chain_open(&cfg, &c, err, sizeof err) != 0) {
        fprintf(stderr, "chain: %s\n", err);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    strata_sampling sp = strata_sampling_default();
    sp.temp = 0; /* greedy */
    int rc = strata_tokenize(c, argv[2], &ids, &n);
    if (rc == 0)
        rc = strata_generate(c, ids, n, 32, &sp, print_token, NULL);
    if (rc != 0)
        fprintf(stderr, "chain: %s\n", strata_chain_error(c));
    printf("\n");
    strata_free(ids);
    strata_chain_close(c);
    return rc == 0 ? 0 : 1;
}
