/* commands.h - the subcommands of the `strata` CLI. Each takes the
 * arguments after its name (argv[0] is the subcommand's name) and returns
 * the process exit status (0 success, 1 runtime error, 2 usage error);
 * each prints its own one-line error message. Only main() calls exit(). */
#ifndef ST_CLI_COMMANDS_H
#define ST_CLI_COMMANDS_H

#include <cjson/cJSON.h>

#include "common/base/pool.h"
#include "kernels/kernels.h"
#include "strata.pb-c.h"

int st_cmd_run(int argc, char **argv);        /* cmd_run.c */
int st_cmd_chat(int argc, char **argv);       /* cmd_chat.c */
int st_cmd_tokenize(int argc, char **argv);   /* cmd_text.c */
int st_cmd_detokenize(int argc, char **argv); /* cmd_text.c */
int st_cmd_convert(int argc, char **argv);    /* cmd_convert.c */
int st_cmd_bench(int argc, char **argv);      /* cmd_bench.c: dispatches to: */
int st_bench_run(int argc, char **argv);      /* bench_run in cmd_bench.c */
int st_bench_kernels(int argc, char **argv);  /* bench_kernels.c */
/* st_bench_print_cpu - prints "cpu: MODEL; kernels NAME (variants this CPU
 * supports: ...)" (the model from /proc/cpuinfo). st_bench_print_bandwidth
 * - prints and returns the median GB/s of 3 read passes (after a warm-up)
 * over a 512 MiB buffer on pool's threads, in bench run's "bandwidth:"
 * format; 0 if the buffer cannot be allocated. Both in cmd_bench.c, for
 * bench run and bench kernels. */
void st_bench_print_cpu(const st_kernel_ops *ops);
double st_bench_print_bandwidth(st_pool *pool);
int st_bench_wire_codec(int argc, char **argv); /* bench_wire_codec.c */
int st_bench_wire(int argc, char **argv);       /* bench_wire.c */
int st_bench_wire_seal(int argc, char **argv);  /* bench_wire_seal.c */

/* cluster commands (cmd_cluster.c); they talk to a coordinator given by
 * --coordinator ADDR or the STRATA_COORDINATOR environment variable */
int st_cmd_status(int argc, char **argv);
int st_cmd_generate(int argc, char **argv);
int st_cmd_keygen(int argc, char **argv);

/* placement commands (cmd_plan.c), same --coordinator rule */
int st_cmd_plan(int argc, char **argv); /* the serving plan, or --dry-run */
int st_cmd_replan(int argc, char **argv);
int st_cmd_drain(int argc, char **argv);

/* the test-only step gate (cmd_hold.c; coordinator --test-hooks) */
int st_cmd_hold(int argc, char **argv);
/* cli_hold_json - a HoldState as JSON (`strata hold --json`, `strata status
 * --json`'s sched.hold); the caller owns it. cli_hold_print - as one line. */
cJSON *cli_hold_json(const Strata__HoldState *h);
void cli_hold_print(const Strata__HoldState *h);

#endif
