/*  test_frame.c — the LIVE frame without sockets (src/runtime/kvt_frame.c):
    the sender part built, a received frame split and checked.

    Each bad shape is refused with its own reason, in the order the driver
    counts them; a good frame is accepted with views into the parts it was
    given; a frame of another deployment is refused as foreign, naming the
    link id it carried. tests/fuzz/fuzz_frame.c checks the same contract on
    any bytes; tests/test_auth.c and test_runtime_live.c through sockets.
*/
#include <criterion/criterion.h>
#include <string.h>

#include "kvtier/kvt_actor.h"
#include "runtime/kvt_frame.h"

#define S_LINK 0x0807060504030201ULL //  this deployment's link id

static const uint8_t s_msg[] = {0x93, 0x01, 0x01, 0x80}; //  a message part (not decoded here)

//  A sender part: `name`, then (with `nul`) a NUL and `nlink` bytes of `link`
//  (little-endian, a ninth byte 0xee).
static size_t s_sender(uint8_t *out, const char *name, bool nul, uint64_t link, size_t nlink)
{
    size_t n = strlen(name);
    memcpy(out, name, n);
    if (nul)
        out[n++] = 0;
    for (size_t b = 0; b < nlink; b++)
        out[n++] = b < 8 ? (uint8_t)(link >> (8 * b)) : 0xee;
    return n;
}

//  Parses a frame of `nparts` parts, sender part `s`/`n` (then s_msg, when
//  there is a second part), against `link_id`, into an *f full of garbage.
static kvt_frame_status_t s_parse_n(int nparts, const uint8_t *s, size_t n, uint64_t link_id,
                                    kvt_frame_t *f)
{
    memset(f, 0xa5, sizeof *f);
    return kvt_frame_parse(nparts, s, n, nparts > 1 ? s_msg : NULL, nparts > 1 ? sizeof s_msg : 0,
                           link_id, f);
}

static kvt_frame_status_t s_parse(const uint8_t *s, size_t n, uint64_t link_id, kvt_frame_t *f)
{
    return s_parse_n(2, s, n, link_id, f);
}

static void s_assert_refused(kvt_frame_status_t st, kvt_frame_status_t want, const char *why,
                             const kvt_frame_t *f)
{
    cr_assert_eq(st, want, "status %d (%s), want %d", (int)st, kvt_frame_why(st), (int)want);
    cr_assert(strstr(kvt_frame_why(st), why), "'%s' says %s", kvt_frame_why(st), why);
    cr_assert_null(f->name, "a refused frame leaves no name");
    cr_assert_eq(f->name_len, 0);
    cr_assert_null(f->payload, "a refused frame leaves no message");
    cr_assert_eq(f->payload_len, 0);
    if (want != KVT_FRAME_FOREIGN)
        cr_assert_eq(f->link, 0, "only a foreign frame names a link id");
}

// ----------------------------------------------------------- accepted ------

Test(frame, a_frame_of_this_deployment_is_accepted_with_views_into_its_parts)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    size_t n = s_sender(s, "aggregator", true, S_LINK, 8);
    kvt_frame_t f;
    cr_assert_eq(s_parse(s, n, S_LINK, &f), KVT_FRAME_OK);
    cr_assert_eq((const uint8_t *)f.name, s, "the name is a view of the sender part");
    cr_assert_eq(f.name_len, strlen("aggregator"));
    cr_assert_eq(f.link, S_LINK);
    cr_assert_eq(f.payload, s_msg, "the message is the second part");
    cr_assert_eq(f.payload_len, sizeof s_msg);
    cr_assert_str_eq(kvt_frame_why(KVT_FRAME_OK), "");
}

Test(frame, a_system_without_a_link_id_accepts_a_bare_name_or_link_id_zero)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, "$system", false, 0, 0);
    cr_assert_eq(s_parse(s, n, 0, &f), KVT_FRAME_OK);
    cr_assert_eq(f.name_len, 7);
    n = s_sender(s, "runner.0", true, 0, 8);
    cr_assert_eq(s_parse(s, n, 0, &f), KVT_FRAME_OK, "a NUL and 8 zero bytes is link id 0");
    cr_assert_eq(f.name_len, 8, "the name stops at the NUL");
}

Test(frame, the_link_id_is_little_endian)
{
    const uint8_t s[] = {'e', 0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    kvt_frame_t f;
    cr_assert_eq(s_parse(s, sizeof s, S_LINK, &f), KVT_FRAME_OK);
    cr_assert_eq(f.link, 0x0807060504030201ULL);
}

Test(frame, a_name_of_47_bytes_is_accepted)
{
    char name[KVT_ACTOR_NAME_MAX];
    memset(name, 'r', sizeof name - 1);
    name[sizeof name - 1] = 0;
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, name, true, S_LINK, 8);
    cr_assert_eq(s_parse(s, n, S_LINK, &f), KVT_FRAME_OK);
    cr_assert_eq(f.name_len, KVT_ACTOR_NAME_MAX - 1);
}

//  The message part is the decoder's to judge (an empty one is a decode
//  error, counted as decode_errors, not a bad frame).
Test(frame, an_empty_message_part_is_left_to_the_decoder)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    size_t n = s_sender(s, "engine", true, S_LINK, 8);
    kvt_frame_t f;
    cr_assert_eq(kvt_frame_parse(2, s, n, s_msg, 0, S_LINK, &f), KVT_FRAME_OK);
    cr_assert_eq(f.payload_len, 0);
}

// ------------------------------------------------------------ refused ------

Test(frame, one_part_is_refused)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    size_t n = s_sender(s, "aggregator", true, S_LINK, 8);
    kvt_frame_t f;
    s_assert_refused(s_parse_n(1, s, n, S_LINK, &f), KVT_FRAME_ONE_PART, "one part", &f);
}

Test(frame, more_than_two_parts_are_refused)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    size_t n = s_sender(s, "aggregator", true, S_LINK, 8);
    kvt_frame_t f;
    s_assert_refused(s_parse_n(3, s, n, S_LINK, &f), KVT_FRAME_MANY_PARTS, "more than two parts",
                     &f);
}

Test(frame, a_link_id_of_other_than_8_bytes_is_refused)
{
    uint8_t s[KVT_FRAME_SENDER_MAX + 1];
    kvt_frame_t f;
    const size_t sizes[] = {0, 1, 7, 9};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = s_sender(s, "aggregator", true, S_LINK, sizes[i]);
        s_assert_refused(s_parse(s, n, S_LINK, &f), KVT_FRAME_LINK_SIZE, "a link id is 8 bytes",
                         &f);
        cr_assert_eq(f.link, 0, "%zu bytes", sizes[i]);
    }
}

Test(frame, a_frame_of_another_deployment_is_refused_naming_its_link_id)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, "aggregator", true, S_LINK ^ 0x80, 8);
    s_assert_refused(s_parse(s, n, S_LINK, &f), KVT_FRAME_FOREIGN, "another deployment", &f);
    cr_assert_eq(f.link, S_LINK ^ 0x80, "the link id it carried, for the log");
    n = s_sender(s, "aggregator", true, S_LINK, 8);
    s_assert_refused(s_parse(s, n, 0, &f), KVT_FRAME_FOREIGN, "another deployment", &f);
    cr_assert_eq(f.link, S_LINK, "a receiver without a link id refuses one that has");
}

Test(frame, a_bare_name_at_a_receiver_with_a_link_id_is_foreign)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, "aggregator", false, 0, 0);
    s_assert_refused(s_parse(s, n, S_LINK, &f), KVT_FRAME_FOREIGN, "another deployment", &f);
    cr_assert_eq(f.link, 0, "no link id is link id 0");
}

Test(frame, an_empty_name_is_refused)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, "", true, S_LINK, 8);
    s_assert_refused(s_parse(s, n, S_LINK, &f), KVT_FRAME_NAME_SIZE, "a name is 1 to 47 bytes", &f);
    s_assert_refused(s_parse(s, 0, 0, &f), KVT_FRAME_NAME_SIZE, "a name is 1 to 47 bytes", &f);
}

Test(frame, a_name_of_48_bytes_is_refused)
{
    uint8_t s[KVT_FRAME_SENDER_MAX + 1];
    memset(s, 'r', KVT_ACTOR_NAME_MAX);
    s[KVT_ACTOR_NAME_MAX] = 0;
    for (int b = 0; b < 8; b++)
        s[KVT_ACTOR_NAME_MAX + 1 + b] = (uint8_t)(S_LINK >> (8 * b));
    kvt_frame_t f;
    s_assert_refused(s_parse(s, KVT_ACTOR_NAME_MAX + 9, S_LINK, &f), KVT_FRAME_NAME_SIZE,
                     "a name is 1 to 47 bytes", &f);
    s_assert_refused(s_parse(s, KVT_ACTOR_NAME_MAX, 0, &f), KVT_FRAME_NAME_SIZE,
                     "a name is 1 to 47 bytes", &f);
}

//  The driver counts a frame of another deployment as foreign whatever
//  else is wrong with its sender part, and a link id of the wrong size as
//  bad before asking whose it is.
Test(frame, the_checks_run_in_the_drivers_order)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    kvt_frame_t f;
    size_t n = s_sender(s, "", true, S_LINK ^ 1, 8);
    cr_assert_eq(s_parse(s, n, S_LINK, &f), KVT_FRAME_FOREIGN, "foreign before the name");
    n = s_sender(s, "aggregator", true, S_LINK ^ 1, 7);
    cr_assert_eq(s_parse(s, n, S_LINK, &f), KVT_FRAME_LINK_SIZE, "size before foreign");
    cr_assert_eq(s_parse_n(1, s, n, S_LINK, &f), KVT_FRAME_ONE_PART, "parts first");
}

// ------------------------------------------------------------- sender ------

Test(frame, the_sender_part_is_the_name_then_nul_and_link_id_when_there_is_one)
{
    uint8_t s[KVT_FRAME_SENDER_MAX];
    cr_assert_eq(kvt_frame_sender(s, "$system", 7, 0), 7, "no link id: the bare name");
    cr_assert_eq(memcmp(s, "$system", 7), 0);
    size_t n = kvt_frame_sender(s, "runner.0", 8, S_LINK);
    const uint8_t want[] = {'r', 'u', 'n', 'n', 'e', 'r', '.', '0', 0, 1, 2, 3, 4, 5, 6, 7, 8};
    cr_assert_eq(n, sizeof want);
    cr_assert_eq(memcmp(s, want, n), 0, "name, NUL, link id little-endian");
    kvt_frame_t f;
    cr_assert_eq(s_parse(s, n, S_LINK, &f), KVT_FRAME_OK, "what is built parses");
    cr_assert_eq(f.name_len, 8);
}
