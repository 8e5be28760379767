/*  kvt_wcore_out — the worker core's outbox (kvt_wcore.h): room for the
    reports a spec owes, and the one report of each channel (counted), in
    the order the core makes them. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_wcore_int.h"

static const kvt_hash_t ZERO = {0, 0};

// ------------------------------------------------------------- outbox ----

//  Makes room for k more reports beyond the outbox and what open records
//  owe. A spec whose reports cannot be held is dropped unreported (counted,
//  logged; the aggregator settles the key failed by its timeout, rule A4).
int kvt_wcore_reserve_(kvt_wcore_t *self, uint32_t k, kvt_opid_t op)
{
    uint64_t need = (uint64_t)self->nout + self->owed + k;
    if (need <= self->outcap)
        return 0;
    uint64_t cap = self->outcap ? self->outcap : 16;
    while (cap < need)
        cap *= 2;
    kvt_completion_t *out = cap <= UINT32_MAX ? realloc(self->out, cap * sizeof *out) : NULL;
    if (!out) {
        self->st.unreported += k;
        kvt_wcore_log_(self, 0, "out of memory: %u item(s) of %llu/%u dropped unreported", k,
                       (unsigned long long)op.req, op.gen);
        return -1;
    }
    self->out = out;
    self->outcap = (uint32_t)cap;
    return 0;
}

kvt_completion_t *kvt_wcore_out_(kvt_wcore_t *self, uint8_t chan, kvt_opid_t op, uint32_t attempt,
                                 kvt_hash_t key, bool ok, uint32_t detail, uint32_t lower)
{
    assert(self->nout < self->outcap);
    kvt_completion_t *c = &self->out[self->nout++];
    memset(c, 0, sizeof *c);
    c->epoch = self->c.epoch;
    c->chan = chan;
    c->op = op;
    c->key = key;
    c->rank = self->c.rank;
    c->ok = ok;
    c->detail = ok ? KVT_DETAIL_OK : detail;
    c->attempt = attempt;
    c->lower = ok ? lower : 0;
    return c;
}

void kvt_wcore_load_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, bool ok,
                            uint32_t detail, uint32_t lower)
{
    if (ok)
        self->st.loads_ok++;
    else
        self->st.loads_failed++;
    kvt_wcore_out_(self, KVT_CHAN_LOAD, op, attempt, ZERO, ok, detail, lower);
}

//  The state verdict of a load: `ran` false is the neutral report (ok,
//  SKIPPED) of a rank whose state leg did not run.
void kvt_wcore_state_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                             bool ran, uint32_t detail)
{
    if (!ran) {
        self->st.states_neutral++;
        kvt_completion_t *c = kvt_wcore_out_(self, KVT_CHAN_STATE, op, attempt, key, true, 0, 0);
        c->detail = KVT_DETAIL_SKIPPED;
        return;
    }
    if (detail == 0)
        self->st.states_ok++;
    else
        self->st.states_failed++;
    kvt_wcore_out_(self, KVT_CHAN_STATE, op, attempt, key, detail == 0, detail, 0);
}

void kvt_wcore_save_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                            bool ok, uint32_t detail, bool fenced)
{
    if (ok)
        self->st.saves_ok++;
    else
        self->st.saves_failed++;
    kvt_completion_t *c = kvt_wcore_out_(self, KVT_CHAN_SAVE, op, attempt, key, ok, detail, 0);
    c->fenced = fenced;
}

void kvt_wcore_safe_report_(kvt_wcore_t *self, kvt_opid_t op, uint32_t attempt, kvt_hash_t key,
                            bool ok, uint32_t detail)
{
    if (!self->c.source_safe)
        return;
    if (ok)
        self->st.source_safe++;
    else
        self->st.source_unsafe++;
    kvt_wcore_out_(self, KVT_CHAN_SOURCE_SAFE, op, attempt, key, ok, detail, 0);
}

const kvt_completion_t *kvt_wcore_outbox(const kvt_wcore_t *self, uint32_t *n)
{
    *n = self->nout;
    return self->out;
}

void kvt_wcore_outbox_clear(kvt_wcore_t *self)
{
    self->nout = 0;
    for (uint32_t i = 0; i < self->nimgs; i++)
        free(self->imgs[i]);
    self->nimgs = 0;
}
