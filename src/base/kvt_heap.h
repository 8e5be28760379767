/*  kvt_heap — the binary min-heap, generic over the element.

    The caller owns the storage (an array and its count; grow it with
    kvt_vec_reserve) and describes the elements once, in a kvt_heap_ops_t:
    their size, the order, and an optional `moved` callback that is told
    every element's new index whenever it changes place — the hook that
    lets a user find an element's heap position in O(1) (cancel a timer,
    refile a stream whose key changed). An element is copied by value, so
    store pointers for large or shared records.

    Order ties are the caller's business: make `less` a total order (break
    ties on a sequence number or an id) and the heap's shape, hence every
    pop, depends only on the operations applied, never on memory layout.

    Everything is static inline: pass a pointer to a `static const` ops
    object and the compiler turns `less` and `moved` into direct, inlined
    calls. Nothing allocates. Costs: push, remove, fix O(log n); top O(1);
    build O(n). */
#ifndef KVT_HEAP_H_INCLUDED
#define KVT_HEAP_H_INCLUDED

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KVT_HEAP_ELEM_MAX 64 //  largest element, bytes (the sifts keep one on the stack)

typedef struct {
    size_t size; //  element bytes, 1..KVT_HEAP_ELEM_MAX
    //  True when a must come out before b (a strict, total order).
    bool (*less)(const void *a, const void *b, void *ctx);
    //  Element `elem` now sits at index `pos`; NULL when nobody tracks it.
    void (*moved)(void *elem, uint32_t pos, void *ctx);
} kvt_heap_ops_t;

static inline void *kvt_heap_at(void *base, const kvt_heap_ops_t *ops, uint32_t pos)
{
    return (char *)base + (size_t)pos * ops->size;
}

//  Copies `elem` to index pos and reports the move.
static inline void kvt_heap_put_(void *base, const kvt_heap_ops_t *ops, void *ctx, uint32_t pos,
                                 const void *elem)
{
    void *dst = kvt_heap_at(base, ops, pos);
    memcpy(dst, elem, ops->size);
    if (ops->moved)
        ops->moved(dst, pos, ctx);
}

//  Moves the element at pos towards the root until its parent is not
//  greater. Returns its final index.
static inline uint32_t kvt_heap_sift_up(void *base, const kvt_heap_ops_t *ops, void *ctx,
                                        uint32_t pos)
{
    _Alignas(max_align_t) unsigned char tmp[KVT_HEAP_ELEM_MAX];
    assert(ops->size <= sizeof tmp);
    memcpy(tmp, kvt_heap_at(base, ops, pos), ops->size);
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;
        void *p = kvt_heap_at(base, ops, parent);
        if (!ops->less(tmp, p, ctx))
            break;
        kvt_heap_put_(base, ops, ctx, pos, p);
        pos = parent;
    }
    kvt_heap_put_(base, ops, ctx, pos, tmp);
    return pos;
}

//  Moves the element at pos towards the leaves of a heap of n elements
//  until no child is smaller. Returns its final index.
static inline uint32_t kvt_heap_sift_down(void *base, uint32_t n, const kvt_heap_ops_t *ops,
                                          void *ctx, uint32_t pos)
{
    _Alignas(max_align_t) unsigned char tmp[KVT_HEAP_ELEM_MAX];
    assert(ops->size <= sizeof tmp && pos < n);
    memcpy(tmp, kvt_heap_at(base, ops, pos), ops->size);
    while (true) {
        uint32_t child = 2 * pos + 1;
        if (child >= n)
            break;
        void *c = kvt_heap_at(base, ops, child);
        if (child + 1 < n) {
            void *right = kvt_heap_at(base, ops, child + 1);
            if (ops->less(right, c, ctx)) {
                child++;
                c = right;
            }
        }
        if (!ops->less(c, tmp, ctx))
            break;
        kvt_heap_put_(base, ops, ctx, pos, c);
        pos = child;
    }
    kvt_heap_put_(base, ops, ctx, pos, tmp);
    return pos;
}

//  Restores the order after the key of the element at pos changed (either
//  way). Returns its final index.
static inline uint32_t kvt_heap_fix(void *base, uint32_t n, const kvt_heap_ops_t *ops, void *ctx,
                                    uint32_t pos)
{
    if (pos > 0 &&
        ops->less(kvt_heap_at(base, ops, pos), kvt_heap_at(base, ops, (pos - 1) / 2), ctx))
        return kvt_heap_sift_up(base, ops, ctx, pos);
    return kvt_heap_sift_down(base, n, ops, ctx, pos);
}

//  Adds a copy of `elem`; the array must have room for *n + 1 elements.
static inline void kvt_heap_push(void *base, uint32_t *n, const kvt_heap_ops_t *ops, void *ctx,
                                 const void *elem)
{
    uint32_t pos = (*n)++;
    memcpy(kvt_heap_at(base, ops, pos), elem, ops->size);
    kvt_heap_sift_up(base, ops, ctx, pos);
}

//  Removes the element at pos, copying it to `out` unless out is NULL
//  (`moved` is not called for it).
static inline void kvt_heap_remove(void *base, uint32_t *n, const kvt_heap_ops_t *ops, void *ctx,
                                   uint32_t pos, void *out)
{
    assert(pos < *n);
    if (out)
        memcpy(out, kvt_heap_at(base, ops, pos), ops->size);
    uint32_t last = --(*n);
    if (pos == last)
        return;
    kvt_heap_put_(base, ops, ctx, pos, kvt_heap_at(base, ops, last));
    kvt_heap_fix(base, *n, ops, ctx, pos);
}

//  Orders n elements in any order into a heap (O(n)). `moved` is called
//  only for elements that change place: a caller that tracks positions
//  records every element's index before building.
static inline void kvt_heap_build(void *base, uint32_t n, const kvt_heap_ops_t *ops, void *ctx)
{
    for (uint32_t i = n / 2; i-- > 0;)
        kvt_heap_sift_down(base, n, ops, ctx, i);
}

#endif
