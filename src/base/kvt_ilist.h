/*  kvt_ilist — an intrusive doubly linked list over dense indices.

    The caller owns the prev/next arrays (one slot per index); the list holds
    head, tail and count. Every operation is O(1). Used for LRU orders: push
    at the tail (young end), evict from the head (old end). An index is in at
    most one list that shares the same prev/next arrays. */
#ifndef KVT_ILIST_H_INCLUDED
#define KVT_ILIST_H_INCLUDED

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#define KVT_ILIST_NONE UINT32_MAX

typedef struct {
    uint32_t head;  //  oldest index, or NONE
    uint32_t tail;  //  youngest index, or NONE
    uint32_t count; //  members
} kvt_ilist_t;

static inline void kvt_ilist_init(kvt_ilist_t *l)
{
    l->head = l->tail = KVT_ILIST_NONE;
    l->count = 0;
}

static inline void kvt_ilist_push_tail(kvt_ilist_t *l, uint32_t *prev, uint32_t *next, uint32_t i)
{
    prev[i] = l->tail;
    next[i] = KVT_ILIST_NONE;
    if (l->tail != KVT_ILIST_NONE)
        next[l->tail] = i;
    else
        l->head = i;
    l->tail = i;
    l->count++;
}

static inline void kvt_ilist_remove(kvt_ilist_t *l, uint32_t *prev, uint32_t *next, uint32_t i)
{
    assert(l->count > 0);
    if (prev[i] != KVT_ILIST_NONE)
        next[prev[i]] = next[i];
    else
        l->head = next[i];
    if (next[i] != KVT_ILIST_NONE)
        prev[next[i]] = prev[i];
    else
        l->tail = prev[i];
    prev[i] = next[i] = KVT_ILIST_NONE;
    l->count--;
}

static inline uint32_t kvt_ilist_pop_head(kvt_ilist_t *l, uint32_t *prev, uint32_t *next)
{
    uint32_t i = l->head;
    if (i != KVT_ILIST_NONE)
        kvt_ilist_remove(l, prev, next, i);
    return i;
}

#endif
