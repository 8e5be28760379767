/*  kvt_frame.c — the LIVE driver's frame: the sender part built, a received
    frame split and checked (kvt_frame.h). No sockets: the driver hands the
    parts it received, the fuzz target (tests/fuzz/fuzz_frame.c) any bytes.

    The checks run in the order the driver counts them: the part count, the
    link id's size, the link id itself (a frame of another deployment is
    foreign whatever its name), then the name's size. Whether the name is an
    actor of the receiver's topology is the driver's to ask. */
#include <assert.h>
#include <string.h>

#include "kvt_frame.h"

_Static_assert(KVT_ACTOR_NAME_MAX == 48, "kvt_frame_why names the longest name: 47 bytes");

kvt_frame_status_t kvt_frame_parse(int nparts, const uint8_t *sender, size_t sender_len,
                                   const uint8_t *payload, size_t payload_len, uint64_t link_id,
                                   kvt_frame_t *out)
{
    assert(out);
    memset(out, 0, sizeof *out);
    if (nparts != 2)
        return nparts < 2 ? KVT_FRAME_ONE_PART : KVT_FRAME_MANY_PARTS;
    const uint8_t *nul = sender_len ? memchr(sender, 0, sender_len) : NULL;
    size_t nlen = nul ? (size_t)(nul - sender) : sender_len;
    if (nul && sender_len != nlen + 9)
        return KVT_FRAME_LINK_SIZE;
    uint64_t link = 0;
    for (size_t b = 0; nul && b < 8; b++)
        link |= (uint64_t)nul[1 + b] << (8 * b);
    if (link != link_id) {
        out->link = link;
        return KVT_FRAME_FOREIGN;
    }
    if (nlen == 0 || nlen >= KVT_ACTOR_NAME_MAX)
        return KVT_FRAME_NAME_SIZE;
    out->name = (const char *)sender;
    out->name_len = nlen;
    out->link = link;
    out->payload = payload;
    out->payload_len = payload_len;
    return KVT_FRAME_OK;
}

const char *kvt_frame_why(kvt_frame_status_t status)
{
    switch (status) {
    case KVT_FRAME_OK:
        return "";
    case KVT_FRAME_ONE_PART:
        return "one part (expected [sender][message])";
    case KVT_FRAME_MANY_PARTS:
        return "more than two parts";
    case KVT_FRAME_LINK_SIZE:
        return "sender part: a link id is 8 bytes";
    case KVT_FRAME_FOREIGN:
        return "a link id of another deployment";
    case KVT_FRAME_NAME_SIZE:
        return "sender part: a name is 1 to 47 bytes";
    }
    return "unknown frame status";
}

size_t kvt_frame_sender(uint8_t *out, const char *name, size_t name_len, uint64_t link_id)
{
    assert(out && name && name_len > 0 && name_len < KVT_ACTOR_NAME_MAX);
    memcpy(out, name, name_len);
    size_t len = name_len;
    if (link_id) {
        out[len++] = 0;
        for (int i = 0; i < 8; i++)
            out[len++] = (uint8_t)(link_id >> (8 * i));
    }
    return len;
}
