"""kvtier: Python bindings over libkvtier (cffi).

The scheduler core (include/kvtier/kvt_sched.h) as Python objects:

    import kvtier
    with kvtier.Scheduler(hbm_blocks=1024, max_running=8) as s:
        s.arrive(1, tokens, max_new_tokens=4)
        for step in itertools.count(1):
            plan = s.plan(step)
            if plan.idle:
                break
            run_forward(plan)            # the engine's own forward
            s.apply(step, ok=True)
        print(s.counters()["sched.finished"])

A refused call raises kvtier.Error (subclasses say which); the C library's
own error text, where it gives one, is the message. A scheduler is not
thread-safe (one caller at a time), as the C core.
"""
from ._kvtier import ffi, lib

__all__ = ["Error", "ConfigError", "RefusedError", "Scheduler", "Plan", "Entry",
           "STATE_POLICIES"]


class Error(Exception):
    """A call libkvtier refused."""


class ConfigError(Error):
    """The configuration was refused; the message names the setting."""


class RefusedError(Error):
    """A call on a request or step the scheduler refused."""


class Entry:
    """One request's tokens in a step: [start, end) into its blocks."""

    __slots__ = ("req", "gen", "start", "end", "first_block", "blocks", "state_slot")

    def __init__(self, e):
        self.req = e.op.req
        self.gen = e.op.gen
        self.start = e.start
        self.end = e.end
        self.first_block = e.first_block
        self.blocks = [e.blocks[i] for i in range(e.nblocks)]
        self.state_slot = e.state_slot if e.state else None

    def __repr__(self):
        return f"Entry(req={self.req}, [{self.start}, {self.end}), {len(self.blocks)} blocks)"


class Plan:
    """What step `step` asks of the ranks (copied out of the core)."""

    __slots__ = ("step", "entries", "nloads", "nsaves", "nlookups", "ntouches", "idle", "hold")

    def __init__(self, p, hold):
        self.step = p.step
        self.entries = [Entry(p.entries[i]) for i in range(p.nentries)]
        self.nloads = p.nloads
        self.nsaves = p.nsaves
        self.nlookups = p.nlookups
        self.ntouches = p.ntouches
        self.idle = bool(p.idle)
        self.hold = hold

    def __repr__(self):
        return (f"Plan(step={self.step}, {len(self.entries)} entries, {self.nloads} loads, "
                f"{self.nsaves} saves, idle={self.idle})")


_CFG_FIELDS = ("block_size", "chunk_size", "hbm_blocks", "tier_chunks", "max_running",
               "step_tokens", "save_retries", "orphan_reclaim_us", "state_bytes",
               "checkpoint_interval", "hbm_checkpoints", "spec_tokens", "min_load_tokens",
               "interval_checkpoints", "lookup_timeout_us", "lookup_pin", "cpu_pool_bytes",
               "no_state_tier", "state_policy", "value_order")

#  state_policy by the name the setting spells it ("kvtier", "interval",
#  "every-chunk", "marconi"): libkvtier's one table of names.
STATE_POLICIES = {ffi.string(lib.kvt_config_state_policy_name(i)).decode(): i
                  for i in range(lib.KVT_STATE_POLICIES)}


def _state_policy(value):
    if isinstance(value, str):
        if value not in STATE_POLICIES:
            raise ConfigError(f"state_policy '{value}': one of {', '.join(STATE_POLICIES)}")
        return STATE_POLICIES[value]
    return value


class Scheduler:
    """The scheduler core (kvt_sched_t). Use as a context manager, or call
    close(); every setting of kvt_sched_cfg_t that the bindings expose is a
    keyword (block_size=16, chunk_size=256, hbm_blocks, tier_chunks=0,
    max_running=64, step_tokens=4096, state_bytes=0, ...), ns a (hi, lo)
    pair of the namespace hash. state_policy is a name of STATE_POLICIES
    ("kvtier", the default, "interval", "every-chunk", "marconi") or its
    value; value_order=True evicts kvtier's HBM checkpoints by the value
    rule."""

    def __init__(self, ns=(0, 1), **settings):
        cfg = ffi.new("kvt_sched_cfg_t *")
        defaults = dict(block_size=16, chunk_size=256, max_running=64, step_tokens=4096)
        defaults.update(settings)
        for key, value in defaults.items():
            if key not in _CFG_FIELDS:
                raise ConfigError(f"unknown setting '{key}' (one of {', '.join(_CFG_FIELDS)})")
            if key == "state_policy":
                value = _state_policy(value)
            setattr(cfg, key, value)
        cfg.ns.hi, cfg.ns.lo = ns
        err = ffi.new("char[512]")
        self._s = lib.kvt_sched_new(cfg, err, 512)
        if self._s == ffi.NULL:
            raise ConfigError(ffi.string(err).decode("utf-8", "replace"))
        self._plan = ffi.new("kvt_step_plan_t *")
        self._tokens = {}  # the arrays handed to kvt_sched_arrive (it copies; kept for clarity)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Destroys the core; later calls raise Error. Idempotent."""
        if getattr(self, "_s", None) not in (None, ffi.NULL):
            p = ffi.new("kvt_sched_t **", self._s)
            lib.kvt_sched_destroy(p)
        self._s = None

    def __del__(self):
        self.close()

    def _core(self):
        if self._s is None:
            raise Error("the scheduler is closed")
        return self._s

    def set_now(self, now_us):
        """The engine's clock (µs) for the state index and the timeouts."""
        lib.kvt_sched_set_now(self._core(), now_us)

    def arrive(self, req, tokens, max_new_tokens, arrival_us=0):
        """Queues a request (tokens: a sequence of token ids, copied)."""
        a = ffi.new("kvt_arrival_t *")
        buf = ffi.new("uint32_t[]", list(tokens))
        a.req, a.tokens, a.ntokens = req, buf, len(buf)
        a.max_new_tokens, a.arrival_us = max_new_tokens, arrival_us
        if lib.kvt_sched_arrive(self._core(), a) != 0:
            raise RefusedError(f"arrival of request {req} refused (a duplicate id, no tokens, "
                               f"or longer than the HBM pool can hold; see counters())")

    def plan(self, step, prev_failed=False):
        """Plans step `step` (applying step - 1). A plan with hold=True is
        empty while loads or saves are outstanding: hand their verdicts
        over and ask again with the same step."""
        rc = lib.kvt_sched_plan(self._core(), step, prev_failed, self._plan)
        if rc == lib.KVT_SCHED_REFUSED:
            raise RefusedError(f"step {step} refused: the next step is "
                               f"{lib.kvt_sched_next_step(self._s)}")
        return Plan(self._plan, rc == lib.KVT_SCHED_HOLD)

    def apply(self, step, ok=True):
        """Step `step` ran on every rank (ok) or not."""
        if lib.kvt_sched_apply(self._core(), step, ok) != 0:
            raise RefusedError(f"apply of step {step} refused (not the step planned last)")

    def finish(self, req):
        """The request stopped early (end of sequence)."""
        if lib.kvt_sched_finish(self._core(), req) != 0:
            raise RefusedError(f"finish of request {req} refused (unknown or already done)")

    def abort(self, req):
        if lib.kvt_sched_abort(self._core(), req) != 0:
            raise RefusedError(f"abort of request {req} refused (unknown or already done)")

    def preempt(self, req):
        if lib.kvt_sched_preempt(self._core(), req) != 0:
            raise RefusedError(f"preemption of request {req} refused")

    @property
    def quiescent(self):
        return bool(lib.kvt_sched_quiescent(self._core()))

    def counters(self):
        """Every named counter (docs/metrics.md), as a dict."""
        cap = lib.KVT_MSG_MAX_STATS
        c = ffi.new("kvt_counter_t[]", cap)
        n = ffi.new("uint32_t *", 0)
        lib.kvt_sched_counters(self._core(), c, n, cap)
        return {ffi.string(c[i].name).decode(): c[i].value for i in range(n[0])}

    def audit(self):
        """Runs the deep audit; raises Error with the core's text when it fails."""
        err = ffi.new("char[512]")
        if lib.kvt_sched_audit(self._core(), err, 512) != 0:
            raise Error(ffi.string(err).decode("utf-8", "replace"))
