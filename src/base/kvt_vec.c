/*  kvt_vec — see kvt_vec.h. */
#include "kvt_vec.h"

#include <stdlib.h>

int kvt_vec_grow(void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    uint64_t n = *cap ? *cap : KVT_VEC_MIN;
    while (n < need)
        n *= 2;
    if (n > UINT32_MAX)
        n = need; //  doubling passed the index range: exactly what was asked
    if (elem == 0 || n > SIZE_MAX / elem)
        return -1;
    void *p = realloc(*arr, (size_t)n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = (uint32_t)n;
    return 0;
}
