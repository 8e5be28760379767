/*  criterion.h — ThreadSanitizer builds only: the part of Criterion's API
    that kvtier's tests use, with the same spellings, run by
    tests/tsan/kvt_tsan_main.c (which says why Criterion itself cannot run
    there). CMake puts tests/tsan first on a TSan test's include path, so
    `#include <criterion/criterion.h>` finds this file.

    Supported: Test and TestSuite with .init .fini .timeout .disabled
    .description .signal .exit_code; cr_assert* / cr_expect* (eq neq lt leq
    gt geq null not_null str_eq str_neq, plain, _not), cr_assert_fail,
    cr_skip_test, cr_log_info/warn/error, cr_malloc/calloc/realloc/free; the
    parameterized tests are in criterion/parameterized.h.

    A message argument must be a string literal (it is pasted after a one
    character prefix so that "no message" is an empty format the checker
    accepts). Numeric failures print the expressions, not their values. */
#ifndef KVT_TSAN_CRITERION_H
#define KVT_TSAN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

//  A test's or a suite's options; a test's non-zero value wins over its
//  suite's, except init/fini, which run for both (suite's outermost).
struct criterion_test_extra_data {
    int sentinel_;           //  keeps the option list non-empty; unused
    void (*init)(void);      //  runs in the test process before the body
    void (*fini)(void);      //  runs after the body, also after a fatal failure
    int signal;              //  if set: the test passes only if it dies of it
    int exit_code;           //  if set: the test passes only if it exits with it
    bool disabled;           //  reported as skipped, never run
    const char *description; //  accepted; not printed
    double timeout;          //  seconds; 0 = the suite's, else no limit
};

//  What a ParameterizedTestParameters function returns.
struct criterion_test_params {
    size_t size;                                     //  bytes per parameter
    void *params;                                    //  the first parameter
    size_t length;                                   //  number of parameters
    void (*cleanup)(struct criterion_test_params *); //  runner calls it once forked; may be NULL
};

//  One registered test (linked by the runner; one per Test/ParameterizedTest).
typedef struct kvt_cr_test {
    const char *suite;                            //  suite name
    const char *name;                             //  test name
    void (*fn)(void);                             //  body of a plain test, else NULL
    void (*pfn)(void *);                          //  body of a parameterized test, else NULL
    struct criterion_test_params (*params)(void); //  its parameters (pfn only)
    struct criterion_test_extra_data opts;        //  options given to Test(...)
    struct kvt_cr_test *next;                     //  runner's list
} kvt_cr_test_t;

//  One TestSuite(...) declaration.
typedef struct kvt_cr_suite {
    const char *name;                      //  suite name
    struct criterion_test_extra_data opts; //  options for every test of the suite
    struct kvt_cr_suite *next;             //  runner's list
} kvt_cr_suite_t;

void kvt_cr_add_test(kvt_cr_test_t *test);
void kvt_cr_add_suite(kvt_cr_suite_t *suite);
void kvt_cr_fail(bool fatal, const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void kvt_cr_str(bool fatal, bool want_equal, const char *file, int line, const char *what,
                const char *a, const char *b, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));
_Noreturn void kvt_cr_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void kvt_cr_log(const char *prefix, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *cr_malloc(size_t size);
void *cr_calloc(size_t nmemb, size_t size);
void *cr_realloc(void *ptr, size_t size);
void cr_free(void *ptr);

// ------------------------------------------------------------ tests -----

#define KVT_CR_ID_(Suite, Name, what) kvt_cr_##Suite##_##Name##_##what

//  Registers the test at load time; the body follows the macro.
#define KVT_CR_REGISTER_(Suite, Name, Fn, PFn, Params, ...)                       \
    static kvt_cr_test_t KVT_CR_ID_(Suite, Name, test) = {.suite = #Suite,        \
                                                          .name = #Name,          \
                                                          .fn = Fn,               \
                                                          .pfn = PFn,             \
                                                          .params = Params,       \
                                                          .opts = {__VA_ARGS__}}; \
    __attribute__((constructor)) static void KVT_CR_ID_(Suite, Name, reg)(void)   \
    {                                                                             \
        kvt_cr_add_test(&KVT_CR_ID_(Suite, Name, test));                          \
    }

#define KVT_CR_TEST_(Suite, Name, ...)                                                    \
    static void KVT_CR_ID_(Suite, Name, impl)(void);                                      \
    KVT_CR_REGISTER_(Suite, Name, KVT_CR_ID_(Suite, Name, impl), NULL, NULL, __VA_ARGS__) \
    static void KVT_CR_ID_(Suite, Name, impl)(void)

#define Test(...) KVT_CR_TEST_(__VA_ARGS__, .sentinel_ = 0)

#define KVT_CR_SUITE_(Suite, ...)                                                         \
    static kvt_cr_suite_t kvt_cr_suite_##Suite = {.name = #Suite, .opts = {__VA_ARGS__}}; \
    __attribute__((constructor)) static void kvt_cr_suite_reg_##Suite(void)               \
    {                                                                                     \
        kvt_cr_add_suite(&kvt_cr_suite_##Suite);                                          \
    }                                                                                     \
    struct kvt_cr_suite_##Suite##_semicolon_

#define TestSuite(...) KVT_CR_SUITE_(__VA_ARGS__, .sentinel_ = 0)

// ------------------------------------------------------- assertions -----

#define KVT_CR_CHECK_(fatal, cond, what, ...)                              \
    do {                                                                   \
        if (!(cond))                                                       \
            kvt_cr_fail(fatal, __FILE__, __LINE__, what, " " __VA_ARGS__); \
    } while (0)
#define KVT_CR_OP_(fatal, a, op, b, ...)                                                 \
    KVT_CR_CHECK_(fatal, (a)op(b), "The expression (" #a ") " #op " (" #b ") is false.", \
                  __VA_ARGS__)
#define KVT_CR_STR_(fatal, eq, a, op, b, ...)                                          \
    kvt_cr_str(fatal, eq, __FILE__, __LINE__,                                          \
               "The expression (as strings) (" #a ") " #op " (" #b ") is false", a, b, \
               " " __VA_ARGS__)

#define cr_assert(c, ...) KVT_CR_CHECK_(true, c, "The expression " #c " is false.", __VA_ARGS__)
#define cr_assert_not(c, ...) \
    KVT_CR_CHECK_(true, !(c), "The expression " #c " is true.", __VA_ARGS__)
#define cr_assert_eq(a, b, ...)      KVT_CR_OP_(true, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)     KVT_CR_OP_(true, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)      KVT_CR_OP_(true, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)     KVT_CR_OP_(true, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)      KVT_CR_OP_(true, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)     KVT_CR_OP_(true, a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...)       KVT_CR_CHECK_(true, (p) == NULL, #p " is not null.", __VA_ARGS__)
#define cr_assert_not_null(p, ...)   KVT_CR_CHECK_(true, (p) != NULL, #p " is null.", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)  KVT_CR_STR_(true, true, a, ==, b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) KVT_CR_STR_(true, false, a, !=, b, __VA_ARGS__)
#define cr_assert_fail(...)                                                                  \
    kvt_cr_fail(true, __FILE__, __LINE__, "The conditions for this assertion were not met.", \
                " " __VA_ARGS__)

#define cr_expect(c, ...) KVT_CR_CHECK_(false, c, "The expression " #c " is false.", __VA_ARGS__)
#define cr_expect_not(c, ...) \
    KVT_CR_CHECK_(false, !(c), "The expression " #c " is true.", __VA_ARGS__)
#define cr_expect_eq(a, b, ...)      KVT_CR_OP_(false, a, ==, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...)     KVT_CR_OP_(false, a, !=, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...)      KVT_CR_OP_(false, a, <, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...)     KVT_CR_OP_(false, a, <=, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...)      KVT_CR_OP_(false, a, >, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...)     KVT_CR_OP_(false, a, >=, b, __VA_ARGS__)
#define cr_expect_null(p, ...)       KVT_CR_CHECK_(false, (p) == NULL, #p " is not null.", __VA_ARGS__)
#define cr_expect_not_null(p, ...)   KVT_CR_CHECK_(false, (p) != NULL, #p " is null.", __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)  KVT_CR_STR_(false, true, a, ==, b, __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...) KVT_CR_STR_(false, false, a, !=, b, __VA_ARGS__)
#define cr_expect_fail(...)                                                                   \
    kvt_cr_fail(false, __FILE__, __LINE__, "The conditions for this assertion were not met.", \
                " " __VA_ARGS__)

#define cr_skip_test(...) kvt_cr_skip(" " __VA_ARGS__)

#define cr_log_info(...)  kvt_cr_log("[----] ", __VA_ARGS__)
#define cr_log_warn(...)  kvt_cr_log("[WARN] ", __VA_ARGS__)
#define cr_log_error(...) kvt_cr_log("[ERR ] ", __VA_ARGS__)

#endif
