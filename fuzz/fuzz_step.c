/* fuzz_step.c - libFuzzer target of the STEP frame (common/wire/step.c), what a
 * worker reads of every batch after the envelope.
 *
 * Input: one mode byte, then bytes.
 *   mode bit 0x01 clear: the bytes are a STEP body. It is split from an
 *       exact-size copy (so ASan sees any over-read); accepted parts must
 *       lie inside it and cover it. A body whose meta unpacks is
 *       forwarded as a worker does (its meta bytes as received, then its
 *       packet): the frame must open to the same bytes and the meta
 *       unpack again. (Not packed again from the unpacked meta:
 *       protobuf-c keeps unknown fields, even of the invalid number 0,
 *       and packs them in a form it then refuses.)
 *   mode bit 0x02 (0x01 clear): moreover the body is sealed into a frame
 *       of kind STEP (or CONTROL with bit 0x04) and opened with
 *       st_step_open, which must agree with st_step_split (or refuse the
 *       other kind with ST_EPROTO), except that an empty body is a hello
 *       (st_msg_link_hello): opened, with no parts.
 *   mode bit 0x01 set: the bytes are a whole frame for an open receiver
 *       (st_step_open); an accepted frame's parts must lie inside it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/step.h"

#define FS_SENDER 1
#define FS_RECEIVER 2
#define FS_MODE_FRAME 0x01u
#define FS_MODE_SEAL 0x02u
#define FS_MODE_CONTROL 0x04u
#define FS_MAX_BODY (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fs_check(int cond)
{
    if (!cond)
        abort();
}

/* fs_inside - p[0..n) lies inside buf[0..len). */
static int fs_inside(const uint8_t *p, size_t n, const uint8_t *buf, size_t len)
{
    return p >= buf && n <= len && (size_t)(p - buf) <= len - n;
}

/* fs_forward - frames the meta bytes p->meta as a worker forwards them,
 * with p's packet, opens the frame and unpacks its meta again. */
static void fs_forward(const st_step_parts *p)
{
    st_env tx, rx;
    fs_check(st_env_init(&tx, NULL, FS_SENDER) == ST_OK);
    fs_check(st_env_init(&rx, NULL, FS_RECEIVER) == ST_OK);
    st_step_out o;
    fs_check(st_step_begin(&tx, p->meta, p->meta_len, p->pkt_len, &o) == ST_OK);
    if (p->pkt_len > 0)
        memcpy(o.pkt, p->pkt, p->pkt_len);
    nng_msg *msg;
    fs_check(st_step_finish(&tx, &o, p->pkt_len, &msg) == ST_OK);
    st_step_parts in;
    uint64_t sender;
    fs_check(st_step_open(&rx, nng_msg_body(msg), nng_msg_len(msg), &in, &sender) == ST_OK);
    fs_check(sender == FS_SENDER && in.meta_len == p->meta_len && in.pkt_len == p->pkt_len);
    fs_check(memcmp(in.meta, p->meta, p->meta_len) == 0 &&
             (p->pkt_len == 0 || memcmp(in.pkt, p->pkt, p->pkt_len) == 0));
    Strata__StepMeta *again;
    fs_check(st_step_meta_unpack(&in, sender, &again) == ST_OK);
    st_step_meta_free(again);
    nng_msg_free(msg);
    st_env_fini(&tx);
    st_env_fini(&rx);
}

/* fs_sealed - body[0..n) sealed in a frame of kind STEP (or CONTROL) and
 * opened: the same verdict and parts as split (the kind refused). */
static void fs_sealed(const uint8_t *body, size_t n, int control, st_err split,
                      const st_step_parts *want)
{
    st_env tx, rx;
    fs_check(st_env_init(&tx, NULL, FS_SENDER) == ST_OK);
    fs_check(st_env_init(&rx, NULL, FS_RECEIVER) == ST_OK);
    size_t len = st_env_size(&tx, n);
    uint8_t *buf = malloc(len);
    fs_check(buf != NULL);
    memcpy(buf + ST_ENV_HDR, body, n);
    fs_check(st_env_seal(&tx, control ? ST_ENV_CONTROL : ST_ENV_STEP, buf, n) == ST_OK);
    st_step_parts p;
    uint64_t sender;
    st_err e = st_step_open(&rx, buf, len, &p, &sender);
    if (control) {
        fs_check(e == ST_EPROTO);
    } else if (n == 0) { /* an empty body is a dialer's hello (msg.h), whatever split says */
        fs_check(e == ST_OK && p.hello && p.meta_len == 0 && p.pkt_len == 0);
    } else {
        fs_check(e == split && !p.hello);
        if (e == ST_OK)
            fs_check(p.meta_len == want->meta_len && p.pkt_len == want->pkt_len &&
                     p.meta == buf + ST_ENV_HDR + ST_STEP_LEN_BYTES);
    }
    free(buf);
    st_env_fini(&tx);
    st_env_fini(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    uint8_t *copy = malloc(size ? size : 1);
    fs_check(copy != NULL);
    memcpy(copy, data, size);
    st_step_parts p;
    if (mode & FS_MODE_FRAME) {
        st_env rx;
        uint64_t sender;
        fs_check(st_env_init(&rx, NULL, FS_RECEIVER) == ST_OK);
        if (st_step_open(&rx, copy, size, &p, &sender) == ST_OK)
            fs_check(p.hello ? p.meta_len == 0 && p.pkt_len == 0
                             : fs_inside(p.meta, p.meta_len, copy, size) &&
                                   fs_inside(p.pkt, p.pkt_len, copy, size));
        st_env_fini(&rx);
        free(copy);
        return 0;
    }
    st_err split = st_step_split(copy, size, &p);
    if ((mode & FS_MODE_SEAL) && size <= FS_MAX_BODY)
        fs_sealed(copy, size, (mode & FS_MODE_CONTROL) != 0, split, &p);
    if (split == ST_OK) {
        fs_check(p.meta == copy + ST_STEP_LEN_BYTES && p.pkt == p.meta + p.meta_len);
        fs_check(ST_STEP_LEN_BYTES + p.meta_len + p.pkt_len == size);
        Strata__StepMeta *m;
        if (st_step_meta_unpack(&p, 0, &m) == ST_OK) {
            st_step_meta_free(m);
            fs_forward(&p);
        }
    }
    free(copy);
    return 0;
}
