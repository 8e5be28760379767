/*  kvt_frame.h — the LIVE driver's frame, built and parsed without
    sockets (kvt_frame.c). Private to src/runtime (and the tests).

    A frame is two ZeroMQ parts: [sender][encoded message]. The sender part
    is the sender's actor name (1 to KVT_ACTOR_NAME_MAX - 1 bytes, no NUL),
    followed, when the sending system's link id is not 0, by a NUL and the
    link id (8 bytes, little-endian). A sender part without a NUL carries
    link id 0. The message part is not looked at here: the decoder checks
    it (an empty one is a decode error, not a bad frame). */
#ifndef KVT_FRAME_H_INCLUDED
#define KVT_FRAME_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#include "kvtier/kvt_actor.h"

#define KVT_FRAME_SENDER_MAX (KVT_ACTOR_NAME_MAX + 8) //  bytes in a sender part, at most

//  What kvt_frame_parse made of a frame; every refusal drops the frame.
typedef enum {
    KVT_FRAME_OK = 0,     //  a frame of this deployment: look the name up, decode
    KVT_FRAME_ONE_PART,   //  no message part
    KVT_FRAME_MANY_PARTS, //  more than two parts
    KVT_FRAME_LINK_SIZE,  //  a NUL, then not exactly 8 bytes of link id
    KVT_FRAME_FOREIGN,    //  the link id is not the receiver's (foreign_frames)
    KVT_FRAME_NAME_SIZE,  //  a name of 0 bytes, or of KVT_ACTOR_NAME_MAX or more
} kvt_frame_status_t;

//  A parsed frame: views into the parts given, nothing copied.
typedef struct {
    const char *name;       //  the sender's name (not NUL-terminated), in the sender part
    size_t name_len;        //  its length
    uint64_t link;          //  the link id the frame carries (0 without one)
    const uint8_t *payload; //  the encoded message: the second part
    size_t payload_len;     //  its length
} kvt_frame_t;

//  Splits a received frame of `nparts` parts, the first two given (a part
//  not received may be NULL, 0), and checks it against the receiver's
//  `link_id`. On KVT_FRAME_OK *out holds the views; on KVT_FRAME_FOREIGN
//  only out->link is set (for the log); on any other refusal *out is
//  zeroed. Reads only the bytes it is given.
kvt_frame_status_t kvt_frame_parse(int nparts, const uint8_t *sender, size_t sender_len,
                                   const uint8_t *payload, size_t payload_len, uint64_t link_id,
                                   kvt_frame_t *out);

//  Why a refused frame was refused, for the log ("" for KVT_FRAME_OK).
const char *kvt_frame_why(kvt_frame_status_t status);

//  Writes the sender part of a frame from `name` (`name_len` bytes, 1 to
//  KVT_ACTOR_NAME_MAX - 1) of a system with `link_id` into `out`, which
//  holds KVT_FRAME_SENDER_MAX bytes; returns its length.
size_t kvt_frame_sender(uint8_t *out, const char *name, size_t name_len, uint64_t link_id);

#endif
