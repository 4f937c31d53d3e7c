/* main.c - the `strata` command line: dispatches to one subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/base/crash.h"
#include "common/base/log.h"
#include "common/base/version.h"

typedef struct cli_cmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
} cli_cmd;

static const cli_cmd cli_cmds[] = {
    {"run", st_cmd_run, "run MODEL (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [sampling flags]"},
    {"chat", st_cmd_chat,
     "chat MODEL [--system TEXT] [--chat-template NAME] [-n N] [sampling flags]\n"
     "              [--coordinator ADDR]   (one user message per line of stdin)"},
    {"tokenize", st_cmd_tokenize, "tokenize MODEL TEXT [--special]"},
    {"detokenize", st_cmd_detokenize, "detokenize MODEL a,b,c [--special]"},
    {"convert", st_cmd_convert, "convert (llama2c IN.bin OUT.gguf | synth OUT.gguf ...)"},
    {"bench", st_cmd_bench, "bench (run MODEL | kernels | wire-codec | wire MODEL | wire-seal)"},
    {"status", st_cmd_status, "status [--json] [--coordinator ADDR] [--cluster-key F] [--encrypt]"},
    {"plan", st_cmd_plan,
     "plan [--json] | plan --dry-run [--objective latency|throughput] [--replicas]\n"
     "              [--workers FILE.json [--model PATH]] [--json]"},
    {"replan", st_cmd_replan, "replan [--force] [--objective latency|throughput] [--json]"},
    {"drain", st_cmd_drain, "drain WORKER [--no-wait] [--timeout-ms N]"},
    {"hold", st_cmd_hold,
     "hold (--after-tokens K [--request ID] | --release) [--json]   (test hooks only)"},
    {"generate", st_cmd_generate,
     "generate (--prompt TEXT | --prompt-ids ...) [-n N] [sampling flags] [--ids]"},
    {"keygen", st_cmd_keygen, "keygen FILE"},
};

static void cli_usage(FILE *f)
{
    fprintf(f, "usage: strata COMMAND [ARGS] | strata --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof cli_cmds / sizeof cli_cmds[0]; i++)
        fprintf(f, "  strata %s\n", cli_cmds[i].usage);
}

int main(int argc, char **argv)
{
    st_log_init(NULL);
    st_crash_install("strata");
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (st_version_asked(argc, argv)) { /* the version flag block (common/base/version.h) */
        st_version_print(stdout, "strata");
        return 0;
    }
    for (size_t i = 0; i < sizeof cli_cmds / sizeof cli_cmds[0]; i++)
        if (strcmp(argv[1], cli_cmds[i].name) == 0)
            return cli_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s' (try strata --help)\n", argv[1]);
    return 2;
}
