#!/bin/sh
# one_home.sh - fails when a concept that docs/architecture.md's one-home
# table gives a home is spelled outside it, in the product's sources
# (common/ coordinator/ worker/ cli/ kernels/ include/; tests, fuzzers,
# benches and deploy tools may spell what they check). Each rule is an
# extended regular expression over C source lines and the files allowed to
# match it. Run by deploy/test.sh before the builds; exit 1 listing every
# line out of its home.
set -eu
cd "$(dirname "$0")/.."
SRC='common coordinator worker cli kernels include'
bad=0
# rule NAME ERE HOME... - every matching line of a .c/.h file outside HOME
# (paths, or folders ending in /) is a violation, but comment lines (their
# text begins with /* or *) and the lines EXCEPT lists (path:text, each
# with its reason below).
rule() {
    name=$1
    ere=$2
    shift 2
    # shellcheck disable=SC2046
    hits=$(git grep -nE "$ere" -- $(for d in $SRC; do printf '%s/*.c %s/*.h ' "$d" "$d"; done) |
        grep -vE '^[^:]+:[0-9]+: *(/\*|\*)' || true)
    for home in "$@"; do
        hits=$(printf '%s\n' "$hits" | grep -v "^$home" || true)
    done
    hits=$(printf '%s\n' "$hits" | while IFS= read -r h; do
        [ -n "$h" ] || continue
        f=${h%%:*}
        rest=${h#*:}
        rest=${rest#*:}
        printf '%s\n' "$EXCEPT" | grep -qxF "$f:$(echo "$rest" | sed 's/^ *//')" || echo "$h"
    done)
    if [ -n "$hits" ]; then
        printf 'one_home: %s outside %s:\n%s\n' "$name" "$*" "$hits"
        bad=1
    fi
}
# Lines allowed outside their home, each for its reason:
# - the program-mode switches of strata-worker (--standalone, --wire-gate
#   choose which program's option table parses argv) and --version, read
#   before any table (common/base/version.h);
# - strata's dispatcher's own --help (before a subcommand is known);
# - tokenize/detokenize: their TEXT operand may begin with '-', which an
#   option table would take for an unknown flag.
EXCEPT='worker/worker_main.c:if (strcmp(argv[i], "--standalone") == 0)
worker/worker_main.c:if (strcmp(argv[i], "--wire-gate") == 0)
common/base/version.c:return argc >= 2 && strcmp(argv[1], "--version") == 0;
cli/main.c:if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
cli/cmd_text.c:return argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
cli/cmd_text.c:if (!found && strcmp(argv[i], "--special") == 0)'
# GGUF key names: arch.c's table (general.*, tokenizer.*, <arch>.* suffixes);
# the container's own key general.alignment is the GGUF reader's
# (common/model/gguf.h, below arch in the layers), which arch's table uses.
rule 'a GGUF key literal' '"(general\.|tokenizer\.(ggml|chat_template))' common/model/arch.c \
    common/model/gguf.h
# tcp:// addresses: splitting HOST:PORT, testing or skipping the scheme,
# writing one from a format ("tcp://%..., st_tcp_format's).
rule 'tcp:// address parsing or formatting' \
    "strrchr\([^,]+, *':'\)|(strn?cmp|memcmp|strstr)\([^;]*\"tcp://\"|\"tcp://\" *\)? *- *1|\"tcp://%" \
    common/net/netaddr.c
# Command-line flags: a flag compared by hand instead of a row of an option table.
rule 'a flag parsed by hand' 'strn?cmp\([^;]*"--?[a-z]' common/base/opt.c
# Little-endian loads and stores of wire and file bytes (byte k of an
# integer shifted by 8k); the kernels' own bit manipulation is theirs.
rule 'a little-endian load or store' \
    '\[[^]]*[1-7]\]\)? *<< *(8|16|24|32|40|48|56)\b|\[[^]]*[1-7]\] *= .*>> *(8|16|24|32|40|48|56)\)' \
    common/base/le.h kernels/
exit $bad
