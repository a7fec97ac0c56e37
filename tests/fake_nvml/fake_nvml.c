/* A stand-in for libnvidia-ml.so.1, for tests on machines without a GPU.
 *
 * Built by tests/fake_nvml/build.py with gcc into a temporary directory (never committed) and
 * found by the daemon through LD_LIBRARY_PATH, so pynvml and trainmon run unchanged: the real
 * loader, the real symbol names (_v2/_v3), the real ctypes ABI and struct layouts.
 *
 * It answers from the JSON scenario named by FAKE_NVML_SCENARIO (format: trainmon/simulation/scenario.py,
 * shared with the Python stand-in). The file is re-read when it changes (checked at most every
 * 50 ms, and on every first nvmlInit), so a test can lose a GPU mid-run by rewriting it. A
 * missing per-GPU key answers NVML_ERROR_NOT_SUPPORTED; "errors" injects a return code per C
 * symbol ("*" = every call on that GPU), and "hang_ms" makes every call on that GPU take that long
 * (a wedged driver). "gpm_refusals": N makes nvmlGpmSampleGet on that GPU answer NO_PERMISSION N times,
 * then succeed (DCGM saw this in unprivileged containers). fakeNvmlCallCount() counts every NVML call made.
 *
 * Built with -DWITHOUT_TEMPERATURE_V it lacks nvmlDeviceGetTemperatureV, as drivers before R565 do: pynvml
 * then finds no such symbol and raises FUNCTION_NOT_FOUND.
 *
 * Own typedefs, not nvml.h: the header's #defines would rename the unversioned symbols.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define API __attribute__((visibility("default")))

enum {
    SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4, INSUFFICIENT_SIZE = 7,
    TIMEOUT = 10, ARGUMENT_VERSION_MISMATCH = 25,
};
enum { VALUE_DOUBLE = 0, VALUE_UNSIGNED_INT = 1, VALUE_UNSIGNED_LONG_LONG = 3 };
#define MAX_GPUS 64
#define MAX_EVENTS 4096
#define XID_EVENT 0x8ULL
#define UNSET_ID 0xFFFFFFFFu
#define RELOAD_NS 50000000LL

/* ---- ABI structs (nvidia-ml-py 13.615 layouts) ---------------------------------------------- */
typedef struct { unsigned gpu, memory; } utilization_t;
typedef struct { unsigned long long total, free, used; } memory_v1_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } memory_v2_t;
typedef struct {
    char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32];
} pci_t;
typedef struct { unsigned version; int sensorType; int temperature; } temperature_v1_t;
typedef union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; int si; } value_t;
typedef struct {
    unsigned fieldId, scopeId; long long timestamp, latencyUsec; int valueType; int nvmlReturn; value_t value;
} field_value_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } process_t;
typedef struct { unsigned version, isSupportedDevice; } gpm_support_t;
typedef struct { char *shortName, *longName, *unit; } gpm_info_t;
typedef struct { unsigned metricId; int nvmlReturn; double value; gpm_info_t metricInfo; } gpm_metric_t;
typedef struct gpm_sample gpm_sample_t;
typedef struct { unsigned version, numMetrics; gpm_sample_t *sample1, *sample2; gpm_metric_t metrics[]; } gpm_get_t;
typedef struct device device_t;
typedef struct {
    device_t *device; unsigned long long eventType, eventData; unsigned gpuInstanceId, computeInstanceId;
} event_data_t;

_Static_assert(sizeof(memory_v2_t) == 40, "memory v2");
_Static_assert(sizeof(pci_t) == 68, "pci info v3");
_Static_assert(sizeof(field_value_t) == 40, "field value");
_Static_assert(sizeof(process_t) == 24, "process info v3");
_Static_assert(sizeof(gpm_metric_t) == 40, "gpm metric");
_Static_assert(sizeof(event_data_t) == 32, "event data");

/* ---- the scenario: JSON flattened to sorted "gpus.0.fields.83" -> value entries ----------- */
typedef struct { char *key; char *str; double num; unsigned long long u; int is_float; } entry_t;
typedef struct { entry_t *e; int n; } table_t;

typedef struct { const char *p, *end; entry_t *e; int n, cap, err; } parser_t;

static void ws(parser_t *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static entry_t *add(parser_t *ps, const char *key) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? ps->cap * 2 : 256;
        ps->e = realloc(ps->e, (size_t)ps->cap * sizeof *ps->e);
    }
    entry_t *e = &ps->e[ps->n++];
    memset(e, 0, sizeof *e);
    e->key = strdup(key);
    return e;
}

static char *string(parser_t *ps) {
    char *out = malloc((size_t)(ps->end - ps->p) + 1), *o = out;
    ps->p++; /* opening quote */
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\' && ps->p < ps->end) {
            c = *ps->p++;
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'u') { ps->p += 4; c = '?'; }
        }
        *o++ = c;
    }
    if (ps->p >= ps->end) ps->err = 1;
    ps->p++;
    *o = 0;
    return out;
}

static void value(parser_t *ps, const char *path) {
    char sub[512];
    ws(ps);
    if (ps->p >= ps->end) { ps->err = 1; return; }
    if (*ps->p == '{' || *ps->p == '[') {
        int object = *ps->p == '{', count = 0;
        ps->p++;
        for (ws(ps); ps->p < ps->end && *ps->p != (object ? '}' : ']'); ws(ps)) {
            if (object) {
                ws(ps);
                if (*ps->p != '"') { ps->err = 1; return; }
                char *key = string(ps);
                snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
                free(key);
                ws(ps);
                if (*ps->p++ != ':') { ps->err = 1; return; }
            } else {
                snprintf(sub, sizeof sub, "%s%s%d", path, *path ? "." : "", count);
            }
            value(ps, sub);
            if (ps->err) return;
            count++;
            ws(ps);
            if (*ps->p == ',') ps->p++;
        }
        ps->p++;
        if (!object) {
            snprintf(sub, sizeof sub, "%s.#", path);
            add(ps, sub)->u = (unsigned long long)count;
        }
    } else if (*ps->p == '"') {
        char *s = string(ps);
        add(ps, path)->str = s;
    } else if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        int truth = *ps->p == 't';
        ps->p += truth ? 4 : 5;
        entry_t *e = add(ps, path);
        e->u = (unsigned long long)truth, e->num = truth;
    } else if (!strncmp(ps->p, "null", 4)) {
        ps->p += 4;
    } else {
        char *stop;
        entry_t *e = add(ps, path);
        e->num = strtod(ps->p, &stop);
        e->is_float = memchr(ps->p, '.', (size_t)(stop - ps->p)) || memchr(ps->p, 'e', (size_t)(stop - ps->p));
        e->u = e->is_float || *ps->p == '-' ? (unsigned long long)(long long)e->num : strtoull(ps->p, NULL, 10);
        if (stop == ps->p) ps->err = 1;
        ps->p = stop;
    }
}

static int by_key(const void *a, const void *b) { return strcmp(((const entry_t *)a)->key, ((const entry_t *)b)->key); }

static const entry_t *find(const table_t *t, const char *key) {
    entry_t probe = {.key = (char *)key};
    return t->n ? bsearch(&probe, t->e, (size_t)t->n, sizeof *t->e, by_key) : NULL;
}

static const entry_t *gpu_key(const table_t *t, int gpu, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const entry_t *gpu_key(const table_t *t, int gpu, const char *fmt, ...) {
    char key[256];
    int used = snprintf(key, sizeof key, "gpus.%d.", gpu);
    va_list args;
    va_start(args, fmt);
    vsnprintf(key + used, sizeof key - (size_t)used, fmt, args);
    va_end(args);
    return find(t, key);
}

/* ---- global state ------------------------------------------------------------------------------ */
struct device { int index; };
struct gpm_sample { int gpu; };
typedef struct { unsigned generation; int cursor; unsigned char registered[MAX_GPUS]; } event_set_t;
typedef struct { int gpu; unsigned long long xid; } event_t;

static device_t devices[MAX_GPUS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static table_t empty;
static const table_t *current_table = &empty; /* old tables are leaked: a reader may still hold one */
static struct { dev_t dev; ino_t ino; struct timespec mtime; off_t size; } loaded;
static long long last_check_ns = -RELOAD_NS;
static int refcount;
static unsigned generation;
static event_t events[MAX_EVENTS];
static int event_count;
static long long seen_ids[MAX_EVENTS];
static int seen_count;
static unsigned long long calls;
static unsigned long long gpm_refused[MAX_GPUS]; /* NO_PERMISSION answers given so far, per GPU */

static long long coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int count_of(const table_t *t, const char *array) {
    char key[128];
    snprintf(key, sizeof key, "%s.#", array);
    const entry_t *e = find(t, key);
    return e ? (int)e->u : 0;
}

static void note_events(const table_t *t) {
    char key[128];
    for (int i = 0, n = count_of(t, "xid_events"); i < n; i++) {
        snprintf(key, sizeof key, "xid_events.%d.id", i);
        const entry_t *id = find(t, key);
        snprintf(key, sizeof key, "xid_events.%d.gpu", i);
        const entry_t *gpu = find(t, key);
        snprintf(key, sizeof key, "xid_events.%d.xid", i);
        const entry_t *xid = find(t, key);
        if (!id || !gpu || !xid) continue;
        int seen = 0;
        for (int s = 0; s < seen_count && !seen; s++) seen = seen_ids[s] == (long long)id->u;
        if (seen || event_count == MAX_EVENTS) continue;
        seen_ids[seen_count++] = (long long)id->u;
        events[event_count++] = (event_t){(int)gpu->u, xid->u};
    }
}

static void load_locked(int force) {
    const char *path = getenv("FAKE_NVML_SCENARIO");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (!force && st.st_ino == loaded.ino && st.st_dev == loaded.dev && st.st_size == loaded.size &&
        st.st_mtim.tv_sec == loaded.mtime.tv_sec && st.st_mtim.tv_nsec == loaded.mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    char *text = malloc((size_t)st.st_size + 1);
    size_t got = fread(text, 1, (size_t)st.st_size, f);
    fclose(f);
    parser_t ps = {.p = text, .end = text + got};
    value(&ps, "");
    free(text);
    if (ps.err) return; /* a half-written file: keep the previous scenario */
    qsort(ps.e, (size_t)ps.n, sizeof *ps.e, by_key);
    table_t *t = malloc(sizeof *t);
    *t = (table_t){ps.e, ps.n};
    __atomic_store_n(&current_table, t, __ATOMIC_RELEASE);
    loaded.dev = st.st_dev, loaded.ino = st.st_ino, loaded.size = st.st_size, loaded.mtime = st.st_mtim;
    note_events(t);
}

static const table_t *scenario(void) {
    long long now = coarse_ns();
    if (now - __atomic_load_n(&last_check_ns, __ATOMIC_RELAXED) >= RELOAD_NS) {
        pthread_mutex_lock(&lock);
        last_check_ns = now;
        load_locked(0);
        pthread_mutex_unlock(&lock);
    }
    return __atomic_load_n(&current_table, __ATOMIC_ACQUIRE);
}

static int gpu_count(const table_t *t) { return count_of(t, "gpus"); }

static int device_index(const table_t *t, const device_t *d) {
    if (d < devices || d >= devices + MAX_GPUS) return -1;
    int index = (int)(d - devices);
    return index < gpu_count(t) ? index : -1;
}

static int injected(const table_t *t, int gpu, const char *symbol) {
    const entry_t *e = gpu_key(t, gpu, "errors.%s", symbol);
    if (!e) e = gpu_key(t, gpu, "errors.*");
    return e ? (int)e->u : SUCCESS;
}

static void hang(const table_t *t, int gpu) {
    const entry_t *e = gpu_key(t, gpu, "hang_ms");
    if (e && e->u) nanosleep(&(struct timespec){(time_t)(e->u / 1000), (long)(e->u % 1000) * 1000000L}, NULL);
}

#define COUNTED() __atomic_fetch_add(&calls, 1, __ATOMIC_RELAXED)
#define INITIALISED() do { COUNTED(); if (!__atomic_load_n(&refcount, __ATOMIC_ACQUIRE)) return UNINITIALIZED; } while (0)
/* The opening of every per-GPU function: `t` the scenario, `gpu` the index, hangs and errors injected. */
#define DEVICE_CALL(handle)                                                  \
    INITIALISED();                                                           \
    const table_t *t = scenario();                                           \
    int gpu = device_index(t, (handle));                                     \
    if (gpu < 0) return INVALID_ARGUMENT;                                    \
    hang(t, gpu);                                                            \
    int fault = injected(t, gpu, __func__);                                  \
    if (fault) return fault

static int get_u(const table_t *t, int gpu, const char *key, unsigned long long *out) {
    const entry_t *e = gpu_key(t, gpu, "%s", key);
    if (!e) return NOT_SUPPORTED;
    *out = e->u;
    return SUCCESS;
}

static int get_uint(const table_t *t, int gpu, const char *key, unsigned *out) {
    unsigned long long v;
    int r = get_u(t, gpu, key, &v);
    if (r == SUCCESS) *out = (unsigned)v;
    return r;
}

static int get_string(const table_t *t, int gpu, const char *key, char *buffer, unsigned size) {
    const entry_t *e = gpu_key(t, gpu, "%s", key);
    if (!e || !e->str) return NOT_SUPPORTED;
    if (strlen(e->str) + 1 > size) return INSUFFICIENT_SIZE;
    strcpy(buffer, e->str);
    return SUCCESS;
}

/* ---- API ---------------------------------------------------------------------------------------- */
API unsigned long long fakeNvmlCallCount(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

API int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    COUNTED();
    pthread_mutex_lock(&lock);
    if (refcount == 0) load_locked(1);
    const table_t *t = current_table;
    const entry_t *e = find(t, "init_error");
    int error = e ? (int)e->u : SUCCESS;
    if (!error) {
        if (refcount++ == 0) generation++;
        for (int i = 0; i < MAX_GPUS; i++) devices[i].index = i;
    }
    pthread_mutex_unlock(&lock);
    return error;
}
API int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
API int nvmlInit(void) { return nvmlInitWithFlags(0); }

API int nvmlShutdown(void) {
    INITIALISED();
    pthread_mutex_lock(&lock);
    refcount--;
    pthread_mutex_unlock(&lock);
    return SUCCESS;
}

API const char *nvmlErrorString(int result) {
    static char text[64];
    snprintf(text, sizeof text, "fake NVML error %d", result);
    return text;
}

API int nvmlSystemGetDriverVersion(char *buffer, unsigned size) {
    INITIALISED();
    const entry_t *e = find(scenario(), "driver_version");
    const char *version = e && e->str ? e->str : "";
    if (strlen(version) + 1 > size) return INSUFFICIENT_SIZE;
    strcpy(buffer, version);
    return SUCCESS;
}

API int nvmlDeviceGetCount_v2(unsigned *count) {
    INITIALISED();
    *count = (unsigned)gpu_count(scenario());
    return SUCCESS;
}
API int nvmlDeviceGetCount(unsigned *count) { return nvmlDeviceGetCount_v2(count); }

API int nvmlDeviceGetHandleByIndex_v2(unsigned index, device_t **device) {
    INITIALISED();
    if (index >= (unsigned)gpu_count(scenario()) || index >= MAX_GPUS) return INVALID_ARGUMENT;
    *device = &devices[index];
    return SUCCESS;
}
API int nvmlDeviceGetHandleByIndex(unsigned index, device_t **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

API int nvmlDeviceGetName(device_t *d, char *buffer, unsigned size) {
    DEVICE_CALL(d);
    return get_string(t, gpu, "name", buffer, size);
}

API int nvmlDeviceGetUUID(device_t *d, char *buffer, unsigned size) {
    DEVICE_CALL(d);
    return get_string(t, gpu, "uuid", buffer, size);
}

API int nvmlDeviceGetMinorNumber(device_t *d, unsigned *out) {
    DEVICE_CALL(d);
    return get_uint(t, gpu, "minor_number", out);
}

API int nvmlDeviceGetPciInfo_v3(device_t *d, pci_t *pci) {
    DEVICE_CALL(d);
    memset(pci, 0, sizeof *pci);
    int r = get_string(t, gpu, "pci_bus_id", pci->busId, sizeof pci->busId);
    if (r != SUCCESS) return r;
    size_t len = strlen(pci->busId);
    strncpy(pci->busIdLegacy, pci->busId + (len > 12 ? len - 12 : 0), sizeof pci->busIdLegacy - 1);
    pci->pciDeviceId = 0x233010de;
    return SUCCESS;
}

API int nvmlDeviceGetUtilizationRates(device_t *d, utilization_t *util) {
    DEVICE_CALL(d);
    unsigned memory = 0;
    get_uint(t, gpu, "utilization_memory", &memory);
    util->memory = memory;
    return get_uint(t, gpu, "utilization_gpu", &util->gpu);
}

static int memory(const table_t *t, int gpu, memory_v2_t *m) {
    m->reserved = 0;
    get_u(t, gpu, "memory_reserved", &m->reserved);
    if (get_u(t, gpu, "memory_total", &m->total) || get_u(t, gpu, "memory_free", &m->free) ||
        get_u(t, gpu, "memory_used", &m->used))
        return NOT_SUPPORTED;
    return SUCCESS;
}

API int nvmlDeviceGetMemoryInfo(device_t *d, memory_v1_t *out) {
    DEVICE_CALL(d);
    memory_v2_t m;
    int r = memory(t, gpu, &m);
    if (r == SUCCESS) *out = (memory_v1_t){m.total, m.free, m.used + m.reserved}; /* v1: reserved + allocated */
    return r;
}

API int nvmlDeviceGetMemoryInfo_v2(device_t *d, memory_v2_t *out) {
    DEVICE_CALL(d);
    if (out->version != 0x02000028u) return ARGUMENT_VERSION_MISMATCH;
    memory_v2_t m;
    int r = memory(t, gpu, &m);
    if (r == SUCCESS) out->total = m.total, out->reserved = m.reserved, out->free = m.free, out->used = m.used;
    return r;
}

#ifndef WITHOUT_TEMPERATURE_V
API int nvmlDeviceGetTemperatureV(device_t *d, temperature_v1_t *out) {
    DEVICE_CALL(d);
    if (out->version != 0x0100000Cu) return ARGUMENT_VERSION_MISMATCH;
    if (out->sensorType != 0) return NOT_SUPPORTED;
    unsigned long long v;
    int r = get_u(t, gpu, "temperature_gpu", &v);
    if (r == SUCCESS) out->temperature = (int)v;
    return r;
}
#endif

API int nvmlDeviceGetTemperature(device_t *d, int sensor, unsigned *out) {
    DEVICE_CALL(d);
    return sensor == 0 ? get_uint(t, gpu, "temperature_gpu", out) : NOT_SUPPORTED;
}

#define UINT_GETTER(symbol, key) \
    API int symbol(device_t *d, unsigned *out) { DEVICE_CALL(d); return get_uint(t, gpu, key, out); }
UINT_GETTER(nvmlDeviceGetPowerUsage, "power_usage_mw")
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, "power_limit_mw")
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, "pcie_link_gen")
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, "pcie_link_gen_max")
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, "pcie_link_width")
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, "pcie_link_width_max")

API int nvmlDeviceGetCurrentClocksEventReasons(device_t *d, unsigned long long *out) {
    DEVICE_CALL(d);
    return get_u(t, gpu, "clocks_event_reasons", out);
}

API int nvmlDeviceGetSupportedClocksEventReasons(device_t *d, unsigned long long *out) {
    DEVICE_CALL(d);
    return get_u(t, gpu, "supported_clocks_event_reasons", out);
}

API int nvmlDeviceGetClockInfo(device_t *d, int clock, unsigned *out) {
    DEVICE_CALL(d);
    if (clock == 1) return get_uint(t, gpu, "clock_sm_mhz", out);
    if (clock == 2) return get_uint(t, gpu, "clock_memory_mhz", out);
    return NOT_SUPPORTED;
}

API int nvmlDeviceGetFieldValues(device_t *d, int count, field_value_t *values) {
    DEVICE_CALL(d);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < count; i++) {
        field_value_t *v = &values[i];
        /* "fields": {"163@2": n} answers field 163 for scope 2 (a per-link field) only */
        const entry_t *e = gpu_key(t, gpu, "fields.%u@%u", v->fieldId, v->scopeId);
        if (!e) e = gpu_key(t, gpu, "fields.%u", v->fieldId);
        const entry_t *type = gpu_key(t, gpu, "field_types.%u", v->fieldId);
        v->timestamp = now.tv_sec * 1000000LL + now.tv_nsec / 1000;
        v->latencyUsec = 0;
        if (!e) { v->nvmlReturn = NOT_SUPPORTED; continue; }
        v->nvmlReturn = SUCCESS;
        v->valueType = type ? (int)type->u : e->is_float ? VALUE_DOUBLE : VALUE_UNSIGNED_LONG_LONG;
        if (v->valueType == VALUE_DOUBLE) v->value.d = e->num;
        else if (v->valueType == VALUE_UNSIGNED_INT) v->value.ui = (unsigned)e->u;
        else v->value.ull = e->u;
    }
    return SUCCESS;
}

/* nvmlGpuFabricInfo_v2_t; "fabric_state" absent: NOT_SUPPORTED (no NVSwitch fabric) */
typedef struct {
    unsigned version; unsigned char clusterUuid[16]; int status; unsigned cliqueId; unsigned state; unsigned healthMask;
} fabric_info_t;

API int nvmlDeviceGetGpuFabricInfoV(device_t *d, fabric_info_t *info) {
    DEVICE_CALL(d);
    const entry_t *state = gpu_key(t, gpu, "fabric_state");
    if (!state) return NOT_SUPPORTED;
    const entry_t *mask = gpu_key(t, gpu, "fabric_health_mask");
    unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->status = SUCCESS;
    info->state = (unsigned)state->u;
    info->healthMask = mask ? (unsigned)mask->u : 0;
    return SUCCESS;
}

API int nvmlDeviceGetComputeRunningProcesses_v3(device_t *d, unsigned *count, process_t *infos) {
    DEVICE_CALL(d);
    char key[64];
    snprintf(key, sizeof key, "gpus.%d.processes", gpu);
    unsigned n = (unsigned)count_of(t, key);
    if (n == 0) { *count = 0; return SUCCESS; }
    if (!infos || *count < n) { *count = n; return INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) {
        const entry_t *pid = gpu_key(t, gpu, "processes.%u.pid", i);
        const entry_t *used = gpu_key(t, gpu, "processes.%u.used_memory", i);
        infos[i] = (process_t){pid ? (unsigned)pid->u : 0, used ? used->u : 0, UNSET_ID, UNSET_ID};
    }
    *count = n;
    return SUCCESS;
}

/* ---- GPM ------------------------------------------------------------------------------------------ */
static int gpm_supported(const table_t *t, int gpu) {
    const entry_t *e = gpu_key(t, gpu, "gpm_supported");
    return e && e->u;
}

API int nvmlGpmQueryDeviceSupport(device_t *d, gpm_support_t *out) {
    DEVICE_CALL(d);
    if (out->version != 1) return ARGUMENT_VERSION_MISMATCH;
    out->isSupportedDevice = (unsigned)gpm_supported(t, gpu);
    return SUCCESS;
}

API int nvmlGpmSampleAlloc(gpm_sample_t **out) {
    INITIALISED();
    *out = calloc(1, sizeof **out);
    (*out)->gpu = -1;
    return SUCCESS;
}

API int nvmlGpmSampleFree(gpm_sample_t *sample) {
    INITIALISED();
    free(sample);
    return SUCCESS;
}

API int nvmlGpmSampleGet(device_t *d, gpm_sample_t *sample) {
    DEVICE_CALL(d);
    if (!gpm_supported(t, gpu)) return NOT_SUPPORTED;
    unsigned long long refusals = 0;
    get_u(t, gpu, "gpm_refusals", &refusals);
    if (__atomic_fetch_add(&gpm_refused[gpu], 1, __ATOMIC_RELAXED) < refusals) return NO_PERMISSION;
    sample->gpu = gpu;
    return SUCCESS;
}

API int nvmlGpmMetricsGet(gpm_get_t *request) {
    INITIALISED();
    const table_t *t = scenario();
    if (request->version != 1) return ARGUMENT_VERSION_MISMATCH;
    if (!request->sample1 || !request->sample2 || request->sample1->gpu < 0 ||
        request->sample1->gpu != request->sample2->gpu)
        return INVALID_ARGUMENT;
    for (unsigned i = 0; i < request->numMetrics; i++) { /* never past numMetrics: the array length varies */
        gpm_metric_t *m = &request->metrics[i];
        const entry_t *e = gpu_key(t, request->sample1->gpu, "gpm.%u", m->metricId);
        m->nvmlReturn = e ? SUCCESS : NOT_SUPPORTED;
        m->value = e ? e->num : 0.0;
    }
    return SUCCESS;
}

/* ---- XID events ------------------------------------------------------------------------------------ */
API int nvmlEventSetCreate(event_set_t **out) {
    INITIALISED();
    scenario();
    event_set_t *set = calloc(1, sizeof *set);
    pthread_mutex_lock(&lock);
    set->generation = generation;
    set->cursor = event_count; /* events from before the set existed are lost, as with the driver */
    pthread_mutex_unlock(&lock);
    *out = set;
    return SUCCESS;
}

API int nvmlDeviceRegisterEvents(device_t *d, unsigned long long types, event_set_t *set) {
    DEVICE_CALL(d);
    if (!set) return INVALID_ARGUMENT;
    const entry_t *supported = gpu_key(t, gpu, "xid_supported");
    if ((types & ~XID_EVENT) || (supported && !supported->u)) return NOT_SUPPORTED;
    set->registered[gpu] = 1;
    return SUCCESS;
}

API int nvmlEventSetWait_v2(event_set_t *set, event_data_t *data, unsigned timeout_ms) {
    INITIALISED();
    if (!set) return INVALID_ARGUMENT;
    long long deadline = coarse_ns() + (long long)timeout_ms * 1000000LL;
    for (;;) {
        scenario();
        pthread_mutex_lock(&lock);
        if (set->generation != generation || refcount == 0) {
            pthread_mutex_unlock(&lock);
            return UNINITIALIZED;
        }
        while (set->cursor < event_count) {
            event_t e = events[set->cursor++];
            if (e.gpu >= 0 && e.gpu < MAX_GPUS && set->registered[e.gpu]) {
                pthread_mutex_unlock(&lock);
                *data = (event_data_t){&devices[e.gpu], XID_EVENT, e.xid, UNSET_ID, UNSET_ID};
                return SUCCESS;
            }
        }
        pthread_mutex_unlock(&lock);
        long long left = deadline - coarse_ns();
        if (left <= 0) return TIMEOUT;
        /* Real NVML blocks until an event; the fake polls its scenario, rarely, so that its own cost
           does not show in the daemon's CPU figures (tests/bench/bench_daemon_cost.py). */
        long long nap = left < 250000000LL ? left : 250000000LL;
        nanosleep(&(struct timespec){nap / 1000000000LL, nap % 1000000000LL}, NULL);
    }
}

API int nvmlEventSetFree(event_set_t *set) {
    COUNTED();
    free(set);
    return SUCCESS;
}
