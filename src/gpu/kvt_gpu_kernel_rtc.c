/*  kvt_gpu_kernel_rtc.c — compiles the kernel source at run time with
    NVRTC or hiprtc, loaded with dlopen: neither the build nor the library
    needs them, and without them the device backend copies as before (and
    says so).

    Both compilers have the same C interface shape (create a program from
    source, compile with options, fetch the image and the log, destroy), so
    one loader serves both over a table of symbol names. ROCm 5 exports
    hiprtc from libamdhip64; later releases from libhiprtc.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_gpu_kernel.h"

typedef int (*s_create_fn)(void **prog, const char *src, const char *name, int nheaders,
                           const char *const *headers, const char *const *include_names);
typedef int (*s_compile_fn)(void *prog, int nopts, const char *const *opts);
typedef int (*s_size_fn)(void *prog, size_t *size);
typedef int (*s_get_fn)(void *prog, char *out);
typedef int (*s_destroy_fn)(void **prog);
typedef const char *(*s_errstr_fn)(int rc);
typedef int (*s_version_fn)(int *major, int *minor);

//  One compiler's library names and symbols.
typedef struct {
    const char *name;      //  "nvrtc", "hiprtc"
    const char *libs[6];   //  libraries tried in order (NULL-terminated)
    const char *create;    //  nvrtcCreateProgram ...
    const char *compile;   //  ...CompileProgram
    const char *code_size; //  nvrtcGetPTXSize / hiprtcGetCodeSize
    const char *code;      //  nvrtcGetPTX / hiprtcGetCode
    const char *log_size;  //  ...GetProgramLogSize
    const char *log;       //  ...GetProgramLog
    const char *destroy;   //  ...DestroyProgram
    const char *errstr;    //  ...GetErrorString
    const char *version;   //  ...Version
    const char *arch_opt;  //  the option that names the target
} s_rtc_desc_t;

static const s_rtc_desc_t s_desc[2] = {
    {"nvrtc",
     {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so", NULL},
     "nvrtcCreateProgram",
     "nvrtcCompileProgram",
     "nvrtcGetPTXSize",
     "nvrtcGetPTX",
     "nvrtcGetProgramLogSize",
     "nvrtcGetProgramLog",
     "nvrtcDestroyProgram",
     "nvrtcGetErrorString",
     "nvrtcVersion",
     "--gpu-architecture="},
    {"hiprtc",
     {"libhiprtc.so", "libhiprtc.so.6", "libhiprtc.so.7", "libamdhip64.so", "libamdhip64.so.5",
      NULL},
     "hiprtcCreateProgram",
     "hiprtcCompileProgram",
     "hiprtcGetCodeSize",
     "hiprtcGetCode",
     "hiprtcGetProgramLogSize",
     "hiprtcGetProgramLog",
     "hiprtcDestroyProgram",
     "hiprtcGetErrorString",
     "hiprtcVersion",
     "--offload-arch="},
};

//  A loaded compiler (kept loaded for the life of the process).
typedef struct {
    bool tried;           //  loading was attempted
    bool ok;              //  every symbol resolved
    char why[200];        //  the library and version, or what failed
    s_create_fn create;   //  entry points
    s_compile_fn compile; //  ...
    s_size_fn code_size;  //  ...
    s_get_fn code;        //  ...
    s_size_fn log_size;   //  ...
    s_get_fn log;         //  ...
    s_destroy_fn destroy; //  ...
    s_errstr_fn errstr;   //  ...
} s_rtc_t;

static s_rtc_t s_rtc[2];
static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;

//  Resolves `sym` in `h` into *out; false when missing.
static bool s_sym(void *h, const char *sym, void *out)
{
    void *p = dlsym(h, sym);
    memcpy(out, &p, sizeof p);
    return p != NULL;
}

//  Loads compiler `k` once (under s_mu).
static s_rtc_t *s_load(kvt_gpu_rtc_t rtc)
{
    int k = rtc == KVT_GPU_RTC_NVRTC ? 0 : 1;
    const s_rtc_desc_t *d = &s_desc[k];
    s_rtc_t *r = &s_rtc[k];
    if (r->tried)
        return r;
    r->tried = true;
    void *h = NULL;
    const char *lib = NULL;
    for (int i = 0; d->libs[i] && !h; i++) {
        h = dlopen(d->libs[i], RTLD_NOW | RTLD_LOCAL);
        lib = d->libs[i];
    }
    if (!h) {
        kvt_gpu_fmt(r->why, sizeof r->why, "%s: no library (tried %s and %s)", d->name, d->libs[0],
                    d->libs[1]);
        return r;
    }
    s_version_fn version = NULL;
    bool ok = s_sym(h, d->create, &r->create) && s_sym(h, d->compile, &r->compile) &&
              s_sym(h, d->code_size, &r->code_size) && s_sym(h, d->code, &r->code) &&
              s_sym(h, d->log_size, &r->log_size) && s_sym(h, d->log, &r->log) &&
              s_sym(h, d->destroy, &r->destroy) && s_sym(h, d->errstr, &r->errstr);
    if (!ok) {
        kvt_gpu_fmt(r->why, sizeof r->why, "%s: %s lacks its entry points", d->name, lib);
        dlclose(h);
        return r;
    }
    int major = 0, minor = 0;
    if (s_sym(h, d->version, &version))
        version(&major, &minor);
    kvt_gpu_fmt(r->why, sizeof r->why, "%s %d.%d (%s)", d->name, major, minor, lib);
    r->ok = true;
    return r;
}

bool kvt_gpu_rtc_available(kvt_gpu_rtc_t rtc, char *why, size_t why_len)
{
    pthread_mutex_lock(&s_mu);
    s_rtc_t *r = s_load(rtc);
    kvt_gpu_fmt(why, why_len, "%s", r->why);
    bool ok = r->ok;
    pthread_mutex_unlock(&s_mu);
    return ok;
}

int kvt_gpu_rtc_compile(kvt_gpu_rtc_t rtc, const char *arch, void **image, size_t *len, char *why,
                        size_t why_len)
{
    *image = NULL;
    *len = 0;
    pthread_mutex_lock(&s_mu);
    s_rtc_t *r = s_load(rtc);
    pthread_mutex_unlock(&s_mu);
    if (!r->ok) {
        kvt_gpu_fmt(why, why_len, "%s", r->why);
        return KVT_GPU_EUNSUPPORTED;
    }
    const s_rtc_desc_t *d = &s_desc[rtc == KVT_GPU_RTC_NVRTC ? 0 : 1];
    char arch_opt[96];
    kvt_gpu_fmt(arch_opt, sizeof arch_opt, "%s%s", d->arch_opt, arch);
    const char *opts[] = {arch_opt, "-std=c++17"};
    void *prog = NULL;
    int rc = r->create(&prog, kvt_gpu_kernel_source(), "kvt_gpu_kernel.cu", 0, NULL, NULL);
    if (rc != 0) {
        kvt_gpu_fmt(why, why_len, "%s: %s: %s", r->why, d->create, r->errstr(rc));
        return KVT_GPU_EDEVICE;
    }
    int out = 0;
    rc = r->compile(prog, 2, opts);
    if (rc != 0) {
        char log[160] = "";
        size_t n = 0;
        if (r->log_size(prog, &n) == 0 && n > 0) {
            char *full = malloc(n + 1);
            if (full && r->log(prog, full) == 0) {
                full[n] = 0;
                kvt_gpu_fmt(log, sizeof log, "%s", full);
                for (char *c = log; *c; c++)
                    if (*c == '\n')
                        *c = ' ';
            }
            free(full);
        }
        kvt_gpu_fmt(why, why_len, "%s: compiling for %s failed: %s: %s", r->why, arch,
                    r->errstr(rc), log);
        out = KVT_GPU_EDEVICE;
        goto cleanup;
    }
    size_t n = 0;
    rc = r->code_size(prog, &n);
    char *buf = rc == 0 && n > 0 ? malloc(n) : NULL;
    if (!buf || r->code(prog, buf) != 0) {
        free(buf);
        kvt_gpu_fmt(why, why_len, "%s: no image for %s (%zu bytes)", r->why, arch, n);
        out = KVT_GPU_EDEVICE;
        goto cleanup;
    }
    *image = buf;
    *len = n;
    kvt_gpu_fmt(why, why_len, "%s, %s", r->why, arch);

cleanup:
    r->destroy(&prog);
    return out;
}
