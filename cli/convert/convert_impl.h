/* convert_impl.h - internals shared by the parts of `strata convert`:
 * cmd_convert.c (the command, and the metadata both converters write),
 * convert_vocab.c (the vocabularies), convert_synth.c (synthetic models)
 * and convert_llama2c.c (llama2.c checkpoints). Not for use elsewhere. */
#ifndef ST_CLI_CONVERT_IMPL_H
#define ST_CLI_CONVERT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"
#include "common/model/gguf_write.h"
#include "common/model/llama.h"
#include "kernels/kernels.h"

/* The placeholder vocabulary's fixed tokens: the special ones (<unk>, <s>,
 * </s>, at these ids), then the 256 byte tokens. */
enum { CV_ID_UNK = 0, CV_ID_BOS = 1, CV_ID_EOS = 2, CV_N_SPECIAL = 3 };
#define CV_N_BYTE 256
#define CV_MIN_VOCAB (CV_N_SPECIAL + CV_N_BYTE)

/* A vocabulary as tokenizer.ggml.* stores it: pieces, scores, token types
 * (common/text/tokenizer.h's st_tok_type numbers). */
typedef struct cv_vocab {
    int64_t n;
    char **toks;
    size_t *lens;
    float *scores;
    int32_t *types;
} cv_vocab;

/* cv_vocab_free - frees v's arrays and zeroes it (convert_vocab.c). */
void cv_vocab_free(cv_vocab *v);

/* cv_vocab_placeholder - the placeholder SPM vocabulary of n >= 259 tokens
 * (cmd_convert.c's file comment) (convert_vocab.c). */
st_err cv_vocab_placeholder(cv_vocab *v, int64_t n);

/* cv_vocab_llama2c - llama2.c's tokenizer.bin at path, which must hold
 * exactly n tokens (convert_vocab.c). */
st_err cv_vocab_llama2c(cv_vocab *v, const char *path, int64_t n);

/* cv_hparams_derive - the fields of hp that follow from the dimensions
 * (arch, n_embd, n_head, n_head_kv set and dividing; head_dim set, or 0 for
 * n_embd / n_head): q and KV widths,
 * rope (all of a head's dims, the architecture's pairing) and the
 * epsilon and rope base every converted file carries (cmd_convert.c). */
void cv_hparams_derive(st_hparams *hp);

/* cv_add_meta - adds the general, <arch> and tokenizer keys of a model of
 * weight dtype type, in the shared files' order (cmd_convert.c); after
 * feed_forward_length, for a mixture of experts (n_expert > 0): the
 * experts' width under the row's moe_ff_key when that is not
 * feed_forward_length, expert_count and expert_used_count; after
 * vocab_size, only where hp has them: attention.key_length and
 * value_length (head_dim other than n_embd / n_head), attention.sliding_window
 * (swa_window > 0), rope.freq_base_swa (architectures whose sliding-window
 * layers have their own base), attn_logit_softcapping and
 * final_logit_softcapping (caps > 0). */
st_err cv_add_meta(st_gguf_writer *w, const char *name, st_dtype type, const st_hparams *hp,
                   const cv_vocab *v);

/* cv_fail - prints e as `strata: ...` and returns exit status 1. */
int cv_fail(st_err e);

/* The two converters: argv as st_cmd_convert's; exit status 0, 1 or 2. */
int cv_synth(int argc, char **argv);   /* convert_synth.c */
int cv_llama2c(int argc, char **argv); /* convert_llama2c.c */

#endif
