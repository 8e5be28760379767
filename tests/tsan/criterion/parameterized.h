/*  parameterized.h — ThreadSanitizer builds only: Criterion's parameterized
    tests (see criterion.h next to this file). The runner calls the
    parameters function in the runner process and forks one test process per
    parameter, which receives a pointer to its element; the cleanup function,
    if any, runs in the runner once every element has been forked. */
#ifndef KVT_TSAN_CRITERION_PARAMETERIZED_H
#define KVT_TSAN_CRITERION_PARAMETERIZED_H

#include "criterion.h"

#define ParameterizedTestParameters(Suite, Name) \
    static struct criterion_test_params KVT_CR_ID_(Suite, Name, param)(void)

#define KVT_CR_PARAM_TEST_(Param, Suite, Name, ...)                           \
    static struct criterion_test_params KVT_CR_ID_(Suite, Name, param)(void); \
    static void KVT_CR_ID_(Suite, Name, impl)(Param);                         \
    static void KVT_CR_ID_(Suite, Name, pimpl)(void *param)                   \
    {                                                                         \
        KVT_CR_ID_(Suite, Name, impl)(param);                                 \
    }                                                                         \
    KVT_CR_REGISTER_(Suite, Name, NULL, KVT_CR_ID_(Suite, Name, pimpl),       \
                     KVT_CR_ID_(Suite, Name, param), __VA_ARGS__)             \
    static void KVT_CR_ID_(Suite, Name, impl)(Param)

#define ParameterizedTest(...) KVT_CR_PARAM_TEST_(__VA_ARGS__, .sentinel_ = 0)

//  cr_make_param_array(Type, Array, Length[, Cleanup])
#define KVT_CR_PARAM_ARRAY_(Type, Array, ...) \
    ((struct criterion_test_params){.size = sizeof(Type), .params = (void *)(Array), __VA_ARGS__})
#define cr_make_param_array(...) KVT_CR_PARAM_ARRAY_(__VA_ARGS__)

#endif
