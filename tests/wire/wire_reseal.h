/* wire_reseal.h - recomputing the CRC-32C tag of an activation packet made
 * or changed by hand, so that a malformed field under test is reached
 * instead of the checksum. Shared by the malformed-packet corpus
 * (test_wire_corpus.c) and the fuzzer (fuzz/fuzz_wire.c); it needs no test
 * framework. */
#ifndef ST_TEST_WIRE_RESEAL_H
#define ST_TEST_WIRE_RESEAL_H

#include <stddef.h>

/* wt_reseal - writes the CRC-32C tag of the packet in buf[0, len) as
 * docs/wire-format.md section 4 defines it: over the payload, the row
 * descriptors, then the header with its tag field zeroed; stored in tag
 * bytes 0..3, bytes 4..15 zero. The payload starts after the header's
 * n_rows descriptors. Returns -1, changing nothing, when len cannot hold
 * the 128-byte header and those descriptors; else 0. */
int wt_reseal(unsigned char *buf, size_t len);

#endif
