"""Builds kvtier._kvtier, the cffi extension over libkvtier's scheduler core.

Usage: /usr/bin/python3 python/kvtier/_build.py OUTDIR [--pkg-config | --tree SRC BUILD]

--pkg-config (the default) compiles against the installed library that
`pkg-config kvtier` names (set PKG_CONFIG_PATH for a staged install);
--tree compiles against a source tree's include/ and the shared library in
a CMake build directory, with that directory as the run path. The module
lands in OUTDIR/kvtier/ next to a copy of the package's Python files.
"""
import os
import shutil
import subprocess
import sys

import cffi

CDEF = r"""
typedef struct { uint64_t hi; uint64_t lo; } kvt_hash_t;
typedef struct { uint64_t req; uint32_t gen; ...; } kvt_opid_t;
typedef struct { char name[...]; uint64_t value; } kvt_counter_t;
typedef struct {
    uint64_t req; uint32_t *tokens; uint32_t ntokens; uint32_t max_new_tokens;
    uint64_t arrival_us; ...;
} kvt_arrival_t;
typedef struct {
    kvt_opid_t op; uint32_t start; uint32_t end; uint32_t first_block;
    uint32_t *blocks; uint32_t nblocks; bool state; uint32_t state_slot; ...;
} kvt_entry_t;
typedef struct {
    uint64_t step; kvt_entry_t *entries; uint32_t nentries; uint32_t nloads;
    uint32_t nsaves; bool idle; uint32_t nlookups; uint32_t ntouches; ...;
} kvt_step_plan_t;
typedef enum {
    KVT_STATE_POLICY_KVTIER, KVT_STATE_POLICY_INTERVAL, KVT_STATE_POLICY_EVERY_CHUNK,
    KVT_STATE_POLICY_MARCONI, KVT_STATE_POLICIES, ...
} kvt_sched_state_policy_t;
typedef struct {
    uint32_t block_size; uint32_t chunk_size; uint32_t hbm_blocks; uint32_t tier_chunks;
    uint32_t max_running; uint32_t step_tokens; uint32_t save_retries;
    uint64_t orphan_reclaim_us; kvt_hash_t ns; uint64_t state_bytes;
    uint32_t checkpoint_interval; uint32_t hbm_checkpoints; uint32_t spec_tokens;
    uint32_t min_load_tokens; bool interval_checkpoints; uint64_t lookup_timeout_us;
    bool lookup_pin; uint64_t cpu_pool_bytes; bool no_state_tier;
    kvt_sched_state_policy_t state_policy; bool value_order; ...;
} kvt_sched_cfg_t;
typedef struct _kvt_sched_t kvt_sched_t;

#define KVT_SCHED_HOLD ...
#define KVT_SCHED_REFUSED ...
#define KVT_MSG_MAX_STATS ...

kvt_sched_t *kvt_sched_new(const kvt_sched_cfg_t *cfg, char *err, size_t errlen);
void kvt_sched_destroy(kvt_sched_t **self_p);
int kvt_sched_arrive(kvt_sched_t *self, const kvt_arrival_t *arrival);
void kvt_sched_set_now(kvt_sched_t *self, uint64_t now_us);
int kvt_sched_apply(kvt_sched_t *self, uint64_t step, bool ok);
int kvt_sched_finish(kvt_sched_t *self, uint64_t req);
int kvt_sched_plan(kvt_sched_t *self, uint64_t step, bool prev_failed, kvt_step_plan_t *plan);
bool kvt_sched_quiescent(const kvt_sched_t *self);
uint64_t kvt_sched_next_step(const kvt_sched_t *self);
void kvt_sched_counters(const kvt_sched_t *self, kvt_counter_t *c, uint32_t *n, uint32_t cap);
int kvt_sched_abort(kvt_sched_t *self, uint64_t req);
int kvt_sched_preempt(kvt_sched_t *self, uint64_t req);
int kvt_sched_audit(const kvt_sched_t *self, char *err, size_t errlen);
const char *kvt_config_state_policy_name(int policy);
"""


def _pkg_config(*args):
    out = subprocess.run(["pkg-config", *args, "kvtier"], check=True, capture_output=True,
                         text=True).stdout.split()
    return out


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    outdir = os.path.abspath(argv[1])
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    if len(argv) >= 5 and argv[2] == "--tree":
        src, build = os.path.abspath(argv[3]), os.path.abspath(argv[4])
        kw = dict(include_dirs=[os.path.join(src, "include")], library_dirs=[build],
                  libraries=["kvtier"], extra_link_args=["-Wl,-rpath," + build])
    else:
        cflags, libs = _pkg_config("--cflags"), _pkg_config("--libs")
        libdirs = [f[2:] for f in libs if f.startswith("-L")]
        kw = dict(extra_compile_args=cflags, extra_link_args=libs +
                  ["-Wl,-rpath," + d for d in libdirs])
    ffi.set_source("kvtier._kvtier",
                   "#include <kvtier/kvt_sched.h>\n#include <kvtier/kvt_config.h>", **kw)
    pkg = os.path.join(outdir, "kvtier")
    os.makedirs(pkg, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    for f in os.listdir(here):
        if f.endswith(".py") and f != "_build.py":
            shutil.copy(os.path.join(here, f), pkg)
    ffi.compile(tmpdir=outdir, verbose=False)


if __name__ == "__main__":
    main(sys.argv)
