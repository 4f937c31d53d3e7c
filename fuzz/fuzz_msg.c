/* fuzz_msg.c - libFuzzer target of the protobuf decoders every socket
 * runs on received bytes, through the budgeted allocator
 * (common/wire/pbuf_budget.h): st_msg_decode (every control socket, the
 * coordinator's results socket, the CLI's replies) and
 * st_step_meta_unpack (the workers' data sockets).
 *
 * Input: one selector byte, then bytes.
 *   selector % (2 + the Msg oneof's fields):
 *     0  the bytes are a whole Msg body (any kind, or none);
 *     1  the bytes are a StepMeta;
 *     k  the bytes are the body of the (k-2)-th field of Msg's oneof
 *        (Join, Heartbeat, Prepare, StepResult, PollReply, ...): they are
 *        wrapped in that field's tag and length, so every kind a socket
 *        accepts is reached directly.
 * Each decode must refuse or accept without a crash, leak or over-read
 * (ASan sees the exact-size copies); an accepted Msg has a body of the
 * selected kind, and st_pb_count never counts fewer elements than were
 * decoded in the lists the decoders bound (Join kernels, StepMeta rows):
 * the pre-scan is an upper bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/msg.h"
#include "common/wire/pbuf_budget.h"
#include "common/wire/step.h"
#include "common/wire/wire.h"

#define FM_SENDER 1
#define FM_MODE_MSG 0
#define FM_MODE_STEP 1
#define FM_MODES_FIXED 2
#define FM_WT_LEN 2
#define FM_F_JOIN 1
#define FM_F_CAP 2
#define FM_F_KERNELS 6
#define FM_F_ROWS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fm_check(int cond)
{
    if (!cond)
        abort();
}

/* fm_msg - decodes buf[0..len) as a Msg; when want (a field number) is
 * not 0 an accepted one must have that body. */
static void fm_msg(const uint8_t *buf, size_t len, uint32_t want)
{
    Strata__Msg *m = NULL;
    if (st_msg_decode(buf, len, FM_SENDER, &m) != ST_OK) {
        fm_check(m == NULL);
        return;
    }
    fm_check(m != NULL && m->body_case != STRATA__MSG__BODY__NOT_SET);
    fm_check(want == 0 || (uint32_t)m->body_case == want);
    fm_check(st_msg_case_name(m) != NULL);
    if (want == FM_F_JOIN && m->join->cap != NULL) { /* the only top-level field */
        static const uint32_t path[] = {FM_F_JOIN, FM_F_CAP, FM_F_KERNELS};
        size_t n;
        fm_check(st_pb_count(buf, len, path, 3, &n) == ST_OK && n >= m->join->cap->n_kernels);
    }
    st_msg_free(m);
}

static void fm_step(const uint8_t *buf, size_t len)
{
    st_step_parts p = {.meta = buf, .meta_len = len};
    Strata__StepMeta *m = NULL;
    if (st_step_meta_unpack(&p, FM_SENDER, &m) != ST_OK) {
        fm_check(m == NULL);
        return;
    }
    static const uint32_t path[] = {FM_F_ROWS};
    size_t n;
    fm_check(st_pb_count(buf, len, path, 1, &n) == ST_OK && n >= m->n_rows);
    fm_check(m->n_rows <= ST_WIRE_MAX_ROWS);
    st_step_meta_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *d = &strata__msg__descriptor;
    unsigned mode = data[0] % (FM_MODES_FIXED + d->n_fields);
    data++;
    size--;
    uint8_t *buf = malloc(size + 2 * ST_PB_VARINT_MAX);
    fm_check(buf != NULL);
    if (mode == FM_MODE_MSG || mode == FM_MODE_STEP) {
        memcpy(buf, data, size); /* an exact-size view: ASan sees an over-read */
        if (mode == FM_MODE_MSG)
            fm_msg(buf, size, 0);
        else
            fm_step(buf, size);
        free(buf);
        return 0;
    }
    uint32_t field = d->fields[mode - FM_MODES_FIXED].id;
    size_t h = st_pb_put_tag(buf, field, FM_WT_LEN);
    h += st_pb_put_varint(buf + h, size);
    uint8_t *exact = malloc(h + size);
    fm_check(exact != NULL);
    memcpy(exact, buf, h);
    memcpy(exact + h, data, size);
    fm_msg(exact, h + size, field);
    free(exact);
    free(buf);
    return 0;
}
