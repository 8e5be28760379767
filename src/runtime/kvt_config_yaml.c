/*  kvt_config_yaml — a configuration file read with libyaml's event parser:
    one document, one flat mapping of scalar keys to scalar values. */
#include "kvt_config_int.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

//  A plain scalar YAML reads as null: `key:`, `key: ~`, `key: null`.
static bool s_is_null(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    return ev->data.scalar.length == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static const char *s_what(yaml_event_type_t t)
{
    switch (t) {
    case YAML_SEQUENCE_START_EVENT:
        return "a list";
    case YAML_MAPPING_START_EVENT:
        return "a mapping";
    case YAML_ALIAS_EVENT:
        return "an alias";
    default:
        return "not a scalar";
    }
}

int kvt_config_yaml_read(const char *text, size_t len, const char *name, kvt_config_yaml_fn *fn,
                         void *arg, char *err, size_t errlen)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    //  Where the reader is: before the mapping, expecting a key, expecting
    //  the value of `key`, after the mapping.
    enum { BEFORE, KEY, VALUE, AFTER } at = BEFORE;
    char key[128];
    unsigned key_line = 0;
    int documents = 0;
    int rc = -1;
    bool done = false;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            //  Marks are 0-based; the context names what was open, and where.
            unsigned long pl = (unsigned long)parser.problem_mark.line + 1;
            unsigned long pc = (unsigned long)parser.problem_mark.column + 1;
            const char *problem = parser.problem ? parser.problem : "unreadable";
            if (parser.context)
                snprintf(err, errlen,
                         "%s:%lu: column %lu: YAML syntax error: %s (%s started on line %lu)", name,
                         pl, pc, problem, parser.context,
                         (unsigned long)parser.context_mark.line + 1);
            else
                snprintf(err, errlen, "%s:%lu: column %lu: YAML syntax error: %s", name, pl, pc,
                         problem);
            goto cleanup;
        }
        unsigned line = (unsigned)ev.start_mark.line + 1;
        bool bad = false;
        switch (ev.type) {
        case YAML_STREAM_START_EVENT:
        case YAML_DOCUMENT_END_EVENT:
            break;
        case YAML_STREAM_END_EVENT:
            done = true;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (++documents > 1) {
                snprintf(err, errlen, "%s:%u: a configuration is one YAML document", name, line);
                bad = true;
            }
            break;
        case YAML_MAPPING_START_EVENT:
            if (at == BEFORE) //  the top level: the settings
                at = KEY;
            else {
                snprintf(err, errlen, "%s:%u: setting '%s': a mapping; values are scalars", name,
                         line, at == VALUE ? key : "?");
                bad = true;
            }
            break;
        case YAML_MAPPING_END_EVENT:
            at = AFTER;
            break;
        case YAML_SCALAR_EVENT:
            if (at == BEFORE) {
                //  An empty file is one empty plain scalar (no settings).
                if (s_is_null(&ev))
                    at = AFTER;
                else {
                    snprintf(err, errlen,
                             "%s:%u: a configuration is a mapping of settings "
                             "(`cpu_pool: 8GiB`)",
                             name, line);
                    bad = true;
                }
            } else if (at == KEY) {
                if (ev.data.scalar.length == 0 || ev.data.scalar.length >= sizeof key) {
                    snprintf(err, errlen, "%s:%u: a setting's name must be 1..%zu bytes", name,
                             line, sizeof key - 1);
                    bad = true;
                } else if (strlen((const char *)ev.data.scalar.value) != ev.data.scalar.length) {
                    //  "cpu_pool\0x" cut at its NUL would set cpu_pool.
                    snprintf(err, errlen, "%s:%u: a setting's name holds a NUL byte", name, line);
                    bad = true;
                } else {
                    memcpy(key, ev.data.scalar.value, ev.data.scalar.length + 1);
                    key_line = line;
                    at = VALUE;
                }
            } else {
                //  libyaml NUL-terminates scalars; a NUL inside one would cut it.
                const char *v = (const char *)ev.data.scalar.value;
                if (strlen(v) != ev.data.scalar.length) {
                    snprintf(err, errlen, "%s:%u: setting '%s': the value holds a NUL byte", name,
                             key_line, key);
                    bad = true;
                } else {
                    bad = fn(arg, key, s_is_null(&ev) ? "" : v, key_line, err, errlen) != 0;
                    at = KEY;
                }
            }
            break;
        case YAML_SEQUENCE_START_EVENT:
        case YAML_ALIAS_EVENT:
        default:
            if (at == VALUE)
                snprintf(err, errlen, "%s:%u: setting '%s': %s; values are scalars", name, line,
                         key, s_what(ev.type));
            else
                snprintf(err, errlen, "%s:%u: %s where a setting was expected", name, line,
                         s_what(ev.type));
            bad = true;
            break;
        }
        yaml_event_delete(&ev);
        if (bad)
            goto cleanup;
    }
    rc = 0;
cleanup:
    yaml_parser_delete(&parser);
    return rc;
}
