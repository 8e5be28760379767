/*  kvtier version — the version, the device backends compiled into this
    build, and the one AUTO would select now (and why). Probing looks for
    devices without opening one. */
#include <stdio.h>
#include <string.h>

#include "kvt_cmd.h"
#include "kvtier/kvt_gpu.h"

#ifndef KVTIER_VERSION
#define KVTIER_VERSION "unknown"
#endif

int kvt_cmd_version(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: kvtier version\n"
                   "prints the version, the device backends compiled in and the one AUTO\n"
                   "would select on this machine\n");
            return 0;
        }
        fprintf(stderr, "kvtier version: unknown argument '%s'\n", argv[i]);
        return 2;
    }
    printf("kvtier %s\n", KVTIER_VERSION);
    printf("device backends compiled in:");
    const kvt_gpu_backend_t all[] = {KVT_GPU_BACKEND_HOST, KVT_GPU_BACKEND_HIP,
                                     KVT_GPU_BACKEND_CUDA};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (kvt_gpu_compiled(all[i]))
            printf(" %s", kvt_gpu_backend_name(all[i]));
    printf("\n");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (kvt_gpu_compiled(all[i])) {
            char paths[400];
            kvt_gpu_copy_paths(all[i], paths, sizeof paths);
            printf("copy paths (%s): %s\n", kvt_gpu_backend_name(all[i]), paths);
        }
    char why[512];
    kvt_gpu_backend_t pick = kvt_gpu_probe(why, sizeof why);
    printf("AUTO selects: %s (%s)\n", kvt_gpu_backend_name(pick), why);
    return 0;
}
