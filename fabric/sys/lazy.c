/*
 * libfabric, loaded on first use.
 *
 * The process links none of libfabric: the five functions of its library API that the
 * bindings call (everything else is static inline, through the objects' ops tables) are
 * defined here and forward to libfabric.so.1, opened with dlopen the first time one is
 * called. Why: on Debian libfabric.so.1 needs libpsm2 and libinfinipath, whose
 * constructors each spend about 100 ms calibrating a clock at load time, so every process
 * linking libfabric started 0.2 s late even when it never used it (`maestro --version`,
 * `maestro run` with a cached inventory, PMIx-only ranks).
 *
 * Loading must not change the process: those constructors also install signal handlers
 * (libinfinipath's exits with status 1 on SIGTERM), which would replace the handlers the
 * application set up before its first fabric call. Every signal's disposition is saved
 * before dlopen and put back after.
 *
 * The versions asked of dlvsym are those a normal link binds to for these headers.
 * When the library cannot be loaded, the calls fail with -FI_ENOSYS and fi_strerror
 * names the dlopen error.
 */

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#define LIBFABRIC_SONAME "libfabric.so.1"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *handle;
static char load_error[512];

static int (*p_getinfo)(uint32_t, const char *, const char *, uint64_t,
                        const struct fi_info *, struct fi_info **);
static void (*p_freeinfo)(struct fi_info *);
static struct fi_info *(*p_dupinfo)(const struct fi_info *);
static int (*p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*p_strerror)(int);

static void *sym(const char *name, const char *version) {
    void *s = dlvsym(handle, name, version);
    if (!s) s = dlsym(handle, name);
    if (!s && !load_error[0])
        snprintf(load_error, sizeof load_error, "%s has no %s@%s", LIBFABRIC_SONAME, name, version);
    return s;
}

static void load(void) {
    static struct sigaction saved[NSIG];
    static int have[NSIG];
    for (int sig = 1; sig < NSIG; sig++)
        have[sig] = sigaction(sig, NULL, &saved[sig]) == 0;
    handle = dlopen(LIBFABRIC_SONAME, RTLD_NOW | RTLD_LOCAL);
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction now;
        if (have[sig] && sigaction(sig, NULL, &now) == 0 &&
            (now.sa_handler != saved[sig].sa_handler || now.sa_flags != saved[sig].sa_flags))
            sigaction(sig, &saved[sig], NULL);
    }
    if (!handle) {
        const char *e = dlerror();
        snprintf(load_error, sizeof load_error, "cannot load %s: %s", LIBFABRIC_SONAME,
                 e ? e : "unknown error");
        return;
    }
    p_getinfo = sym("fi_getinfo", "FABRIC_1.3");
    p_freeinfo = sym("fi_freeinfo", "FABRIC_1.3");
    p_dupinfo = sym("fi_dupinfo", "FABRIC_1.3");
    p_fabric = sym("fi_fabric", "FABRIC_1.1");
    p_strerror = sym("fi_strerror", "FABRIC_1.0");
}

static int loaded(void) {
    pthread_once(&once, load);
    return handle != NULL;
}

/* The reason libfabric is unusable, or NULL when it loaded. */
const char *mstro_fabric_load_error(void) {
    return loaded() && !load_error[0] ? NULL : load_error;
}

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info) {
    if (!loaded() || !p_getinfo) return -FI_ENOSYS;
    return p_getinfo(version, node, service, flags, hints, info);
}

void fi_freeinfo(struct fi_info *info) {
    if (loaded() && p_freeinfo) p_freeinfo(info);
}

struct fi_info *fi_dupinfo(const struct fi_info *info) {
    if (!loaded() || !p_dupinfo) return NULL;
    return p_dupinfo(info);
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context) {
    if (!loaded() || !p_fabric) return -FI_ENOSYS;
    return p_fabric(attr, fabric, context);
}

const char *fi_strerror(int errnum) {
    if (!loaded() || !p_strerror) return load_error;
    return p_strerror(errnum);
}
