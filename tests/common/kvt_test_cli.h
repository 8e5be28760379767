/*  kvt_test_cli — runs this build's `kvtier` command from a test, shared by
    the tests of the command and its benchmarks. Test code: it asserts. */
#ifndef KVT_TEST_CLI_H_INCLUDED
#define KVT_TEST_CLI_H_INCLUDED

#include <stddef.h>

//  Runs `kvtier ARGS` through the shell: its stdout into out[outcap]
//  (NULL: discarded), its stderr into err[errcap], each NUL-terminated and
//  truncated to fit. Returns its exit status (a normal exit is asserted).
int kvt_tcli_run(const char *args, char *out, size_t outcap, char *err, size_t errcap);

//  Reads the file at path into buf[size] (NUL-terminated, truncated; empty
//  when it cannot be read) and removes the file.
void kvt_tcli_slurp(const char *path, char *buf, size_t size);

#endif
