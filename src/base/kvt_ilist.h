/*  kvt_ilist — the intrusive doubly linked list over dense indices.

    Members are indices into the caller's table; the links live in that
    table, either in a kvt_ilink_t field of each element (KVT_ILINKS) or in
    two parallel arrays (KVT_ILINKS_SPLIT, or the array-taking spellings
    kvt_ilist_push_tail / _remove / _pop_head). The list holds head, tail
    and count. Every operation is O(1) and allocates nothing. Used for LRU
    orders and time-ordered lists: append at the tail (young end), take
    from the head (old end); prepend makes a LIFO. An index is in at most one list of the same
    links at a time; a removed index has both links KVT_ILIST_NONE. */
#ifndef KVT_ILIST_H_INCLUDED
#define KVT_ILIST_H_INCLUDED

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define KVT_ILIST_NONE UINT32_MAX //  "no index": the end of a list

//  The links of one element, for tables that embed them.
typedef struct {
    uint32_t prev; //  older neighbour, or NONE
    uint32_t next; //  younger neighbour, or NONE (free lists may reuse it)
} kvt_ilink_t;

typedef struct {
    uint32_t head;  //  oldest index, or NONE
    uint32_t tail;  //  youngest index, or NONE
    uint32_t count; //  members
} kvt_ilist_t;

//  Where the links of index i are: prev[i * stride] and next[i * stride].
typedef struct {
    uint32_t *prev; //  prev link of index 0
    uint32_t *next; //  next link of index 0
    size_t stride;  //  distance between two indices' links, in uint32_t
} kvt_ilinks_t;

//  Links embedded as the kvt_ilink_t field `member` of each element of
//  `table` (an array of structs; their size is a multiple of 4 bytes since
//  they hold the uint32_t links).
#define KVT_ILINKS(table, member)                                     \
    ((kvt_ilinks_t){&(table)[0].member.prev, &(table)[0].member.next, \
                    sizeof((table)[0]) / sizeof(uint32_t)})

//  Links in two parallel arrays of uint32_t.
#define KVT_ILINKS_SPLIT(prev_arr, next_arr) ((kvt_ilinks_t){(prev_arr), (next_arr), 1})

static inline uint32_t *kvt_ilist_prev_(kvt_ilinks_t k, uint32_t i)
{
    return k.prev + (size_t)i * k.stride;
}

static inline uint32_t *kvt_ilist_next_(kvt_ilinks_t k, uint32_t i)
{
    return k.next + (size_t)i * k.stride;
}

static inline void kvt_ilist_init(kvt_ilist_t *l)
{
    l->head = l->tail = KVT_ILIST_NONE;
    l->count = 0;
}

//  The member after i (younger), or NONE.
static inline uint32_t kvt_ilist_next(kvt_ilinks_t k, uint32_t i)
{
    return *kvt_ilist_next_(k, i);
}

//  Appends i at the tail.
static inline void kvt_ilist_append(kvt_ilist_t *l, kvt_ilinks_t k, uint32_t i)
{
    *kvt_ilist_prev_(k, i) = l->tail;
    *kvt_ilist_next_(k, i) = KVT_ILIST_NONE;
    if (l->tail != KVT_ILIST_NONE)
        *kvt_ilist_next_(k, l->tail) = i;
    else
        l->head = i;
    l->tail = i;
    l->count++;
}

//  Puts i in front of the head (a LIFO free list, for instance).
static inline void kvt_ilist_prepend(kvt_ilist_t *l, kvt_ilinks_t k, uint32_t i)
{
    *kvt_ilist_prev_(k, i) = KVT_ILIST_NONE;
    *kvt_ilist_next_(k, i) = l->head;
    if (l->head != KVT_ILIST_NONE)
        *kvt_ilist_prev_(k, l->head) = i;
    else
        l->tail = i; //  the first member is both ends
    l->head = i;
    l->count++;
}

//  Takes member i out of the list.
static inline void kvt_ilist_unlink(kvt_ilist_t *l, kvt_ilinks_t k, uint32_t i)
{
    assert(l->count > 0);
    uint32_t p = *kvt_ilist_prev_(k, i), n = *kvt_ilist_next_(k, i);
    if (p != KVT_ILIST_NONE)
        *kvt_ilist_next_(k, p) = n;
    else
        l->head = n;
    if (n != KVT_ILIST_NONE)
        *kvt_ilist_prev_(k, n) = p;
    else
        l->tail = p;
    *kvt_ilist_prev_(k, i) = *kvt_ilist_next_(k, i) = KVT_ILIST_NONE;
    l->count--;
}

//  Takes the head out and returns it; NONE when the list is empty.
static inline uint32_t kvt_ilist_take_head(kvt_ilist_t *l, kvt_ilinks_t k)
{
    uint32_t i = l->head;
    if (i != KVT_ILIST_NONE)
        kvt_ilist_unlink(l, k, i);
    return i;
}

//  Moves member i to the tail (an LRU refresh).
static inline void kvt_ilist_to_tail(kvt_ilist_t *l, kvt_ilinks_t k, uint32_t i)
{
    if (l->tail == i)
        return;
    kvt_ilist_unlink(l, k, i);
    kvt_ilist_append(l, k, i);
}

//  The same operations for links in two parallel arrays.
static inline void kvt_ilist_push_tail(kvt_ilist_t *l, uint32_t *prev, uint32_t *next, uint32_t i)
{
    kvt_ilist_append(l, KVT_ILINKS_SPLIT(prev, next), i);
}

static inline void kvt_ilist_remove(kvt_ilist_t *l, uint32_t *prev, uint32_t *next, uint32_t i)
{
    kvt_ilist_unlink(l, KVT_ILINKS_SPLIT(prev, next), i);
}

static inline uint32_t kvt_ilist_pop_head(kvt_ilist_t *l, uint32_t *prev, uint32_t *next)
{
    return kvt_ilist_take_head(l, KVT_ILINKS_SPLIT(prev, next));
}

#endif
