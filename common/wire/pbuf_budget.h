/* pbuf_budget.h - decoding received protobuf within a memory budget.
 *
 * protobuf-c allocates while it decodes: a scratch record per field
 * occurrence, an array per repeated field, a struct per submessage. A
 * 2-byte empty submessage costs it about 170 bytes, so a 32 MiB frame of
 * empty repeated elements once cost a worker 700 MiB. Every unpack of
 * bytes from the network goes through st_pb_unpack, whose allocator
 * refuses any allocation that would take the total past a budget fixed
 * before decoding starts:
 *
 *     budget(len) = len + min(ST_PB_BUDGET_FACTOR * len + ST_PB_BUDGET_SLACK,
 *                             ST_PB_BUDGET_EXTRA_MAX)
 *
 * The `len` term lets a large message of packed numbers (logits, token
 * ids), which decodes to about its own size, through; the rest is what
 * small fields and structs may add (a batch of 4096 one-token rows, a
 * few bytes each on the wire, decodes to some 350 bytes a row), capped,
 * so that a hostile frame of len bytes costs at most
 * len + ST_PB_BUDGET_EXTRA_MAX bytes beyond the frame itself. Each allocation is counted with
 * ST_PB_ALLOC_OVERHEAD bytes more (malloc's header) and the total only grows (frees are not
 * subtracted): the bound is conservative.
 *
 * Counts of repeated fields are bounded before decoding where a limit is
 * known (st_pb_count walks the wire bytes without allocating): the
 * callers (msg.c, step.c) refuse a Join with thousands of kernels or a
 * StepMeta with millions of rows before protobuf-c sees it.
 *
 * A message decoded here is freed with its free_unpacked(m, NULL): the
 * budget's allocator takes its memory from malloc. */
#ifndef ST_PBUF_BUDGET_H
#define ST_PBUF_BUDGET_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/base/err.h"

#define ST_PB_BUDGET_FACTOR 32                   /* bytes per packed byte beyond len */
#define ST_PB_BUDGET_SLACK ((size_t)1 << 20)     /* for small messages */
#define ST_PB_BUDGET_EXTRA_MAX ((size_t)8 << 20) /* beyond len, at most */
#define ST_PB_ALLOC_OVERHEAD 16                  /* bytes counted per allocation */
#define ST_PB_MAX_DEPTH 8                        /* of a path given to st_pb_count */

/* A decoding budget; pass &b->pa to a generated *__unpack. */
typedef struct st_pb_budget {
    ProtobufCAllocator pa;
    size_t limit;   /* bytes that may be allocated in all */
    size_t used;    /* bytes allocated so far (overhead included) */
    size_t refused; /* the first refused request (0: none refused) */
} st_pb_budget;

/* st_pb_budget_limit - budget(len) above (saturating, never below len). */
size_t st_pb_budget_limit(size_t len);

/* st_pb_budget_init - a budget of limit bytes, nothing used. */
void st_pb_budget_init(st_pb_budget *b, size_t limit);

/* st_pb_budget_exceeded - whether an allocation was refused. */
bool st_pb_budget_exceeded(const st_pb_budget *b);

/* st_pb_unpack - decodes buf[0..len) as a message of descriptor d within
 * st_pb_budget_limit(len). ST_ERANGE when it would allocate more (the
 * detail names kind, the frame's size, the budget and sender), ST_EFORMAT
 * when the bytes are not a well-formed message; nothing is allocated on
 * failure. kind names the message in errors ("Msg", "StepMeta"). */
st_err st_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t len,
                    const char *kind, uint64_t sender, ProtobufCMessage **out);

/* st_pb_count - the number of occurrences of the field path[depth - 1]
 * inside the (sub)messages reached by following the length-delimited
 * fields path[0..depth-1) from the top of buf[0..len) (every occurrence
 * of each, as protobuf merges repeated occurrences of a submessage). It
 * allocates nothing. Meant for repeated strings and submessages: each
 * occurrence counts one (a packed array of numbers would count once).
 * ST_EFORMAT when the wire bytes are malformed
 * along the way, ST_EINVAL for depth outside 1..ST_PB_MAX_DEPTH. */
st_err st_pb_count(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth,
                   size_t *count);

/* The largest encoding st_pb_put_varint and st_pb_put_tag write. */
#define ST_PB_VARINT_MAX 10

/* st_pb_put_varint - writes v as a protobuf varint at p (room for
 * ST_PB_VARINT_MAX bytes); returns its length. For tools and tests that
 * build wire bytes by hand (bombs, fuzz inputs). */
size_t st_pb_put_varint(uint8_t *p, uint64_t v);

/* st_pb_put_tag - writes the key of field `field` with wire type wt
 * (0 varint, 2 length-delimited, ...) at p; returns its length. */
size_t st_pb_put_tag(uint8_t *p, uint32_t field, unsigned wt);

#endif
