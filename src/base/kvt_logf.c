/*  kvt_logf — see kvt_logf.h. */
#include "kvt_logf.h"

#include <stdio.h>

void kvt_vlogf(kvt_logf_fn *fn, void *arg, int level, const char *fmt, va_list ap)
{
    if (!fn)
        return;
    char line[KVT_LOGF_LINE];
    vsnprintf(line, sizeof line, fmt, ap);
    fn(arg, level, line);
}

void kvt_logf(kvt_logf_fn *fn, void *arg, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvt_vlogf(fn, arg, level, fmt, ap);
    va_end(ap);
}
