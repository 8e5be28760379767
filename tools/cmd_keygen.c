/*  kvtier keygen PATH — makes a CURVE certificate for authenticated links
    (curve_secret_key, curve_public_keys): PATH holds the public key (the
    file to copy into the peers' curve_public_keys directories), PATH_secret
    both keys, owner-only. An existing file is never overwritten. */
#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_cmd.h"

int kvt_cmd_keygen(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: kvtier keygen PATH\n"
               "writes a CURVE certificate: PATH (public key: copy it into the peers'\n"
               "curve_public_keys directory) and PATH_secret (both keys, mode 600: this\n"
               "process's curve_secret_key)\n");
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "kvtier keygen: expected one PATH (--help)\n");
        return 2;
    }
    const char *path = argv[1];
    char secret[4096];
    if (snprintf(secret, sizeof secret, "%s_secret", path) >= (int)sizeof secret) {
        fprintf(stderr, "kvtier keygen: PATH is too long\n");
        return 2;
    }
    if (access(path, F_OK) == 0 || access(secret, F_OK) == 0) {
        fprintf(stderr, "kvtier keygen: %s or %s exists; not overwritten\n", path, secret);
        return 2;
    }
    zcert_t *cert = zcert_new();
    if (!cert) {
        fprintf(stderr, "kvtier keygen: cannot make a key pair\n");
        return 1;
    }
    //  The secret file is created owner-only before anything is written.
    mode_t old = umask(077);
    const char *failed = zcert_save_secret(cert, secret) != 0 ? secret : NULL;
    umask(old);
    if (!failed && zcert_save_public(cert, path) != 0)
        failed = path;
    if (failed) {
        fprintf(stderr, "kvtier keygen: cannot write %s: %s\n", failed, strerror(errno));
        zcert_destroy(&cert);
        return 1;
    }
    printf("%s\n", zcert_public_txt(cert));
    zcert_destroy(&cert);
    return 0;
}
