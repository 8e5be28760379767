/*  kvt_vec — the growable array: one helper for every "realloc when full,
    doubling" table in the tree.

    The caller keeps the array pointer and its capacity (in elements) in
    its own struct, next to its own count, so tables that grow in step or
    that are walked by index need no wrapper type. Growth doubles from
    KVT_VEC_MIN elements, so n appends cost O(n) copies in all; the fast
    path (room left) is one compare, inlined. */
#ifndef KVT_VEC_H_INCLUDED
#define KVT_VEC_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#define KVT_VEC_MIN 16u //  first capacity of an empty array, in elements

//  Slow path of kvt_vec_reserve (kvt_vec.c).
int kvt_vec_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem);

//  Makes *arr (elements of `elem` bytes, *cap allocated) hold at least
//  `need` elements: the capacity doubles (from KVT_VEC_MIN) until it does.
//  Contents are kept; new elements are uninitialised. 0, or -1 when out of
//  memory or when the size overflows (then *arr and *cap are unchanged).
static inline int kvt_vec_reserve(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    return kvt_vec_grow(arr, cap, need, elem);
}

#endif
