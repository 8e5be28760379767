/*  fuzz_frame.c — libFuzzer target for the LIVE driver's frame parse
    (src/runtime/kvt_frame.c): the sender part (name, NUL, 8-byte link id)
    and the split of a received frame into sender and message.

    The input lays out what a receiver is handed:
      byte 0   mode: bit 0 set = the receiver's link id is S_LINK, else 0;
               bits 1-2: the part count (1 = one part, 3 = three, else two)
      byte 1   the sender part's length (clamped to what follows)
      then     the sender part, then the message part (the rest)
    Each part is copied to a buffer of exactly its size, so a view or a read
    past a part is an ASan report.

    Properties checked on every input:
    * kvt_frame_parse agrees with a reference written from the format's
      description (docs/runtime.md §4.1), check for check and in its order;
    * an accepted frame's name lies in the sender part, is 1 to
      KVT_ACTOR_NAME_MAX - 1 bytes and NUL-free, its link id is the
      receiver's, and its message is exactly the second part; the sender
      part kvt_frame_sender builds from that name parses to the same name,
      and is the received part byte for byte when the link id is not 0;
    * a refused frame names its reason and leaves the views empty (a
      foreign one keeps the link id it carried, which is not the receiver's).

    Build: cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON
           cmake --build build-fuzz --target fuzz_frame
    Run:   ./build-fuzz/fuzz_frame -max_len=256 -dict=tests/fuzz/frame.dict corpus-tmp \
               tests/corpus/frame
*/
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/kvt_fuzz.h"
#include "kvtier/kvt_actor.h"
#include "runtime/kvt_frame.h"

#define S_LINK 0x0123456789abcdefULL //  the receiver's link id when mode bit 0 is set

//  The reference: the format as docs/runtime.md states it, written apart
//  from kvt_frame.c (a byte loop, the link id assembled high byte first).
static kvt_frame_status_t s_expected(int nparts, const uint8_t *s, size_t n, uint64_t link_id,
                                     uint64_t *link_out)
{
    *link_out = 0;
    if (nparts == 1)
        return KVT_FRAME_ONE_PART;
    if (nparts > 2)
        return KVT_FRAME_MANY_PARTS;
    size_t nlen = 0;
    while (nlen < n && s[nlen] != 0)
        nlen++;
    bool has_link = nlen < n;
    if (has_link && n - nlen - 1 != 8)
        return KVT_FRAME_LINK_SIZE;
    uint64_t link = 0;
    for (int b = 7; has_link && b >= 0; b--)
        link = (link << 8) | s[nlen + 1 + (size_t)b];
    *link_out = link;
    if (link != link_id)
        return KVT_FRAME_FOREIGN;
    if (nlen < 1 || nlen > KVT_ACTOR_NAME_MAX - 1)
        return KVT_FRAME_NAME_SIZE;
    return KVT_FRAME_OK;
}

//  Reads every byte of a view (an out-of-bounds view is an ASan report).
static unsigned s_touch(const uint8_t *p, size_t n)
{
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += p[i];
    return sum;
}

static void s_check_accepted(const kvt_frame_t *f, const uint8_t *sender, size_t slen,
                             const uint8_t *payload, size_t plen, uint64_t link_id)
{
    if ((const uint8_t *)f->name != sender || f->name_len > slen)
        KVT_FUZZ_DIE("accepted name is not within the sender part");
    if (f->name_len == 0 || f->name_len >= KVT_ACTOR_NAME_MAX)
        KVT_FUZZ_DIE("accepted a name of %zu bytes", f->name_len);
    if (memchr(f->name, 0, f->name_len))
        KVT_FUZZ_DIE("accepted name holds a NUL");
    if (f->link != link_id)
        KVT_FUZZ_DIE("accepted link id %016llx, the receiver's is %016llx",
                     (unsigned long long)f->link, (unsigned long long)link_id);
    if (f->payload != payload || f->payload_len != plen)
        KVT_FUZZ_DIE("the message is not exactly the second part");
    volatile unsigned sink = s_touch((const uint8_t *)f->name, f->name_len);
    sink += s_touch(f->payload, f->payload_len);
    (void)sink;
    uint8_t built[KVT_FRAME_SENDER_MAX];
    size_t blen = kvt_frame_sender(built, f->name, f->name_len, link_id);
    if (link_id && (blen != slen || memcmp(built, sender, slen) != 0))
        KVT_FUZZ_DIE("the built sender part is not the received one");
    kvt_frame_t back;
    if (kvt_frame_parse(2, built, blen, payload, plen, link_id, &back) != KVT_FRAME_OK ||
        back.name_len != f->name_len || memcmp(back.name, f->name, f->name_len) != 0)
        KVT_FUZZ_DIE("the built sender part does not parse to the same name");
}

int kvt_fuzz_frame(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint64_t link_id = (data[0] & 1) ? S_LINK : 0;
    int nparts = (data[0] >> 1) & 3;
    if (nparts != 1 && nparts != 3)
        nparts = 2;
    size_t slen = data[1] < size - 2 ? data[1] : size - 2;
    size_t plen = size - 2 - slen;
    uint8_t *sender = malloc(slen ? slen : 1);
    uint8_t *payload = malloc(plen ? plen : 1);
    if (!sender || !payload)
        KVT_FUZZ_DIE("out of memory");
    memcpy(sender, data + 2, slen);
    memcpy(payload, data + 2 + slen, plen);
    kvt_frame_t f;
    kvt_frame_status_t st = kvt_frame_parse(nparts, sender, slen, nparts > 1 ? payload : NULL,
                                            nparts > 1 ? plen : 0, link_id, &f);
    uint64_t want_link;
    kvt_frame_status_t want = s_expected(nparts, sender, slen, link_id, &want_link);
    if (st != want)
        KVT_FUZZ_DIE("status %d (%s), the reference says %d (%s)", (int)st, kvt_frame_why(st),
                     (int)want, kvt_frame_why(want));
    if (st == KVT_FRAME_OK) {
        s_check_accepted(&f, sender, slen, payload, plen, link_id);
    } else {
        if (kvt_frame_why(st)[0] == '\0')
            KVT_FUZZ_DIE("refusal %d without a reason", (int)st);
        if (f.name || f.name_len || f.payload || f.payload_len)
            KVT_FUZZ_DIE("refusal %d left a view", (int)st);
        if (st == KVT_FRAME_FOREIGN ? f.link != want_link || f.link == link_id : f.link != 0)
            KVT_FUZZ_DIE("refusal %d: link id %016llx", (int)st, (unsigned long long)f.link);
    }
    free(sender);
    free(payload);
    return 0;
}

KVT_FUZZ_ENTRY(kvt_fuzz_frame)
