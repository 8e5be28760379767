/*  kvt_logf — printf to a log callback: the one helper every component
    with a `(arg, level, line)` log sink formats its lines with (the device
    layer, the lane core, the worker core). */
#ifndef KVT_LOGF_H_INCLUDED
#define KVT_LOGF_H_INCLUDED

#include <stdarg.h>

#define KVT_LOGF_LINE 600 //  bytes of a formatted line, its NUL included (longer ones are cut)

//  A log sink: one line, no newline.
typedef void(kvt_logf_fn)(void *arg, int level, const char *line);

//  Formats fmt into one line and hands it to fn; nothing when fn is NULL.
void kvt_logf(kvt_logf_fn *fn, void *arg, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

//  The same with a va_list.
void kvt_vlogf(kvt_logf_fn *fn, void *arg, int level, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
