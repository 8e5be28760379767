/*  Linked into every test binary of an ASan build (CMake, KVTIER_ASAN).

    Criterion's runner process leaks a few bytes of its own bookkeeping when
    tests run in parallel, and LeakSanitizer would fail the binary for it at
    exit. The runner is the process without BoxFort's BXFI_MAP variable:
    only there is leak tracking switched off. The processes that run the
    tests keep it, so a leak in kvtier code still fails its test. */
#include <stdlib.h>

#include <sanitizer/lsan_interface.h>

__attribute__((constructor)) static void s_runner_without_lsan(void)
{
    if (!getenv("BXFI_MAP"))
        __lsan_disable();
}
