/*
 * MPI reached at run time, in either binary interface (mpi_abi.h). The constants below are
 * facts of the two ABIs, read from their installed headers: Open MPI 4.1's mpi.h (Debian
 * bookworm's libopenmpi-dev; Open MPI 5 keeps them) and MPICH 4.0's (libmpich-dev; the
 * handles' values are MPICH's since 3.x, and Intel MPI and MVAPICH share them).
 */
#include "train/mpi_abi.h"

#ifdef WGML_HAVE_MPI /* (built out with -DWGML_MPI=OFF) */

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* Open MPI's handle types: pointers to structs of its library, incomplete here (only their
   addresses travel), under its own tags so that the pointers' types are its prototypes' */
struct ompi_communicator_t;
struct ompi_datatype_t;
struct ompi_op_t;
struct ompi_errhandler_t;
struct ompi_info_t;
struct ompi_request_t;
struct ompi_status_public_t;
typedef struct ompi_communicator_t *ompi_comm;
typedef struct ompi_datatype_t *ompi_type;
typedef struct ompi_op_t *ompi_op;
typedef struct ompi_request_t *ompi_request;

#define OMPI_COMM_TYPE_SHARED 0 /* the first of its enum */
#define OMPI_MAX_ERROR_STRING 256
#define OMPI_IN_PLACE ((void *)1)
#define OMPI_STATUS_IGNORE ((struct ompi_status_public_t *)0)
/* the objects behind MPI_BYTE, MPI_INT, MPI_INT64_T, MPI_FLOAT, MPI_DOUBLE (wgml_mpi_type's order) */
static const char *const ompi_type_symbols[] = {"ompi_mpi_byte", "ompi_mpi_int", "ompi_mpi_int64_t", "ompi_mpi_float",
                                                "ompi_mpi_double"};

/* MPICH's: every handle an int */
struct MPI_Status; /* (MPICH's tag; only MPI_STATUS_IGNORE is passed) */
#define MPICH_COMM_WORLD 0x44000000
#define MPICH_SUM 0x58000003
#define MPICH_ERRORS_RETURN 0x54000001
#define MPICH_INFO_NULL 0x1c000000
#define MPICH_COMM_TYPE_SHARED 1
#define MPICH_MAX_ERROR_STRING 512
#define MPICH_IN_PLACE ((void *)-1)
#define MPICH_STATUS_IGNORE ((struct MPI_Status *)1)
static const int mpich_types[] = {0x4c00010d, 0x4c000405, 0x4c00083a, 0x4c00040a, 0x4c00080b};

/* the larger of the two families' MPI_MAX_ERROR_STRING, and MPICH's MPI_MAX_LIBRARY_VERSION_STRING */
#define ERROR_STRING_MAX 512
#define LIBRARY_VERSION_MAX 8192

static struct {
    int ok;
    wgml_mpi_family family;
    char library[256];
    char error[512];
    /* the same C type in both families */
    int (*Init_thread)(int *, char ***, int, int *);
    int (*Initialized)(int *);
    int (*Query_thread)(int *);
    int (*Finalize)(void);
    int (*Error_string)(int, char *, int *);
    int (*Get_library_version)(char *, int *);
} mpi;

static struct {
    int (*Abort)(ompi_comm, int);
    int (*Allreduce)(const void *, void *, int, ompi_type, ompi_op, ompi_comm);
    int (*Barrier)(ompi_comm);
    int (*Bcast)(void *, int, ompi_type, int, ompi_comm);
    int (*Comm_free)(ompi_comm *);
    int (*Comm_rank)(ompi_comm, int *);
    int (*Comm_set_errhandler)(ompi_comm, struct ompi_errhandler_t *);
    int (*Comm_size)(ompi_comm, int *);
    int (*Comm_split_type)(ompi_comm, int, int, struct ompi_info_t *, ompi_comm *);
    int (*Iallreduce)(const void *, void *, int, ompi_type, ompi_op, ompi_comm, ompi_request *);
    int (*Wait)(ompi_request *, struct ompi_status_public_t *);
    ompi_comm world;
    ompi_op sum;
    ompi_type types[5];
    struct ompi_errhandler_t *errors_return;
    struct ompi_info_t *info_null;
} ompi;

static struct {
    int (*Abort)(int, int);
    int (*Allreduce)(const void *, void *, int, int, int, int);
    int (*Barrier)(int);
    int (*Bcast)(void *, int, int, int, int);
    int (*Comm_free)(int *);
    int (*Comm_rank)(int, int *);
    int (*Comm_set_errhandler)(int, int);
    int (*Comm_size)(int, int *);
    int (*Comm_split_type)(int, int, int, int, int *);
    int (*Iallreduce)(const void *, void *, int, int, int, int, int *);
    int (*Wait)(int *, struct MPI_Status *);
} mpich;

const char *wgml_mpi_family_name(wgml_mpi_family f)
{
    return f == WGML_MPI_OPEN_MPI ? "Open MPI" : f == WGML_MPI_MPICH ? "MPICH" : "an unknown MPI";
}

const char *wgml_mpi_error(void) { return mpi.error; }
wgml_mpi_family wgml_mpi_loaded_family(void) { return mpi.family; }
const char *wgml_mpi_library(void) { return mpi.library; }

/* dlsym into a pointer of any type (the POSIX way to store an object pointer in a function
   pointer); false, with the message, when the library lacks it */
#define FIND(h, name, dst) find(h, name, (void **)&(dst))
static bool find(void *h, const char *name, void **dst)
{
    if ((*dst = dlsym(h, name))) return true;
    snprintf(mpi.error, sizeof mpi.error, "%s has no %s", mpi.library, name);
    return false;
}

/* The family of the MPI behind h: Open MPI exports its handles' objects; the MPICH family
   says its name in MPI_Get_library_version (callable before MPI_Init) */
static wgml_mpi_family family_of(void *h)
{
    if (dlsym(h, "ompi_mpi_comm_world")) return WGML_MPI_OPEN_MPI;
    if (!mpi.Get_library_version) return WGML_MPI_UNKNOWN;
    static char version[LIBRARY_VERSION_MAX];
    int len = 0;
    if (mpi.Get_library_version(version, &len) != WGML_MPI_SUCCESS) return WGML_MPI_UNKNOWN;
    version[sizeof version - 1] = '\0';
    if (strstr(version, "MPICH") || strstr(version, "Intel(R) MPI") || strstr(version, "MVAPICH")) return WGML_MPI_MPICH;
    return WGML_MPI_UNKNOWN;
}

/* The library to open: WGML_MPI_LIBRARY, else the launcher's family's by soname (upstream
   MPICH, Intel MPI and MVAPICH name theirs libmpi.so.12, Debian's MPICH libmpich.so.12) */
static void *open_library(const char *library, wgml_mpi_family launcher)
{
    static const char *const open_mpi[] = {"libmpi.so.40", NULL};
    static const char *const mpich_names[] = {"libmpich.so.12", "libmpi.so.12", NULL};
    const char *const given[] = {library, NULL};
    const char *const *names = library && *library ? given
                               : launcher == WGML_MPI_OPEN_MPI ? open_mpi
                               : launcher == WGML_MPI_MPICH ? mpich_names
                                                              : NULL;
    if (!names) {
        snprintf(mpi.error, sizeof mpi.error,
                 "the launcher's MPI cannot be told from its variables (neither Open MPI's nor MPICH's Hydra's): "
                 "set WGML_MPI_LIBRARY to its library");
        return NULL;
    }
    char first_error[256] = "";
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL); /* (global: Open MPI's plugins link against it) */
        if (h) {
            snprintf(mpi.library, sizeof mpi.library, "%s", names[i]);
            return h;
        }
        const char *e = dlerror();
        if (i == 0) snprintf(first_error, sizeof first_error, "%s", e ? e : names[i]);
    }
    snprintf(mpi.error, sizeof mpi.error, "no %s library: %s", library && *library ? "MPI" : wgml_mpi_family_name(launcher),
             first_error);
    return NULL;
}

static bool load_open_mpi(void *h)
{
    void *obj = NULL;
    bool ok = FIND(h, "MPI_Abort", ompi.Abort) && FIND(h, "MPI_Allreduce", ompi.Allreduce) &&
              FIND(h, "MPI_Barrier", ompi.Barrier) && FIND(h, "MPI_Bcast", ompi.Bcast) &&
              FIND(h, "MPI_Comm_free", ompi.Comm_free) && FIND(h, "MPI_Comm_rank", ompi.Comm_rank) &&
              FIND(h, "MPI_Comm_set_errhandler", ompi.Comm_set_errhandler) && FIND(h, "MPI_Comm_size", ompi.Comm_size) &&
              FIND(h, "MPI_Comm_split_type", ompi.Comm_split_type) && FIND(h, "MPI_Iallreduce", ompi.Iallreduce) &&
              FIND(h, "MPI_Wait", ompi.Wait);
    /* the predefined handles are the addresses of these objects */
    ok = ok && FIND(h, "ompi_mpi_comm_world", obj) && (ompi.world = obj);
    ok = ok && FIND(h, "ompi_mpi_op_sum", obj) && (ompi.sum = obj);
    ok = ok && FIND(h, "ompi_mpi_errors_return", obj) && (ompi.errors_return = obj);
    ok = ok && FIND(h, "ompi_mpi_info_null", obj) && (ompi.info_null = obj);
    for (int i = 0; ok && i < 5; i++) ok = FIND(h, ompi_type_symbols[i], obj) && (ompi.types[i] = obj);
    return ok;
}

static bool load_mpich(void *h)
{
    return FIND(h, "MPI_Abort", mpich.Abort) && FIND(h, "MPI_Allreduce", mpich.Allreduce) &&
           FIND(h, "MPI_Barrier", mpich.Barrier) && FIND(h, "MPI_Bcast", mpich.Bcast) &&
           FIND(h, "MPI_Comm_free", mpich.Comm_free) && FIND(h, "MPI_Comm_rank", mpich.Comm_rank) &&
           FIND(h, "MPI_Comm_set_errhandler", mpich.Comm_set_errhandler) && FIND(h, "MPI_Comm_size", mpich.Comm_size) &&
           FIND(h, "MPI_Comm_split_type", mpich.Comm_split_type) && FIND(h, "MPI_Iallreduce", mpich.Iallreduce) &&
           FIND(h, "MPI_Wait", mpich.Wait);
}

bool wgml_mpi_load(const char *library, wgml_mpi_family launcher)
{
    if (mpi.ok) return true; /* (a failure is tried again: the settings may have changed) */
    mpi.family = WGML_MPI_UNKNOWN;
    void *h = dlopen(NULL, RTLD_NOW); /* the process's global symbols: a program that links MPI */
    if (h && dlsym(h, "MPI_Init")) {
        snprintf(mpi.library, sizeof mpi.library, "the MPI this program links");
    } else if (!(h = open_library(library, launcher))) {
        return false;
    }
    if (!FIND(h, "MPI_Init_thread", mpi.Init_thread) || !FIND(h, "MPI_Initialized", mpi.Initialized) ||
        !FIND(h, "MPI_Query_thread", mpi.Query_thread) || !FIND(h, "MPI_Finalize", mpi.Finalize) ||
        !FIND(h, "MPI_Error_string", mpi.Error_string) || !FIND(h, "MPI_Get_library_version", mpi.Get_library_version))
        return false;
    mpi.family = family_of(h);
    if (mpi.family == WGML_MPI_UNKNOWN) {
        snprintf(mpi.error, sizeof mpi.error, "%s is neither Open MPI nor of MPICH's family: its binary interface is unknown",
                 mpi.library);
        return false;
    }
    if (!(mpi.family == WGML_MPI_OPEN_MPI ? load_open_mpi(h) : load_mpich(h))) return false;
    mpi.ok = 1;
    return true;
}

/* Handles of either family in a wgml_mpi_comm / wgml_mpi_request: MPICH's ints through
   uint32_t, so that a negative one (a communicator MPI made) comes back as it went */
static uintptr_t from_int(int v) { return (uintptr_t)(uint32_t)v; }
static int to_int(uintptr_t h) { return (int)(int32_t)(uint32_t)h; }
#define OMPI_COMM(c) ((ompi_comm)(c).h)
#define MPICH_COMM(c) to_int((c).h)
#define IS_OMPI (mpi.family == WGML_MPI_OPEN_MPI)

wgml_mpi_comm wgml_mpi_world(void)
{
    return (wgml_mpi_comm){IS_OMPI ? (uintptr_t)ompi.world : from_int(MPICH_COMM_WORLD)};
}

int wgml_mpi_initialized(int *flag) { return mpi.Initialized(flag); }
int wgml_mpi_init_thread(int required, int *provided) { return mpi.Init_thread(NULL, NULL, required, provided); }
int wgml_mpi_query_thread(int *provided) { return mpi.Query_thread(provided); }
int wgml_mpi_finalize(void) { return mpi.Finalize(); }

int wgml_mpi_abort(wgml_mpi_comm comm, int code)
{
    return IS_OMPI ? ompi.Abort(OMPI_COMM(comm), code) : mpich.Abort(MPICH_COMM(comm), code);
}

void wgml_mpi_error_string(int code, char *text, size_t cap)
{
    char words[ERROR_STRING_MAX + 1] = "";
    int len = 0;
    if (!mpi.Error_string || mpi.Error_string(code, words, &len) != WGML_MPI_SUCCESS)
        snprintf(words, sizeof words, "MPI error %d", code);
    words[ERROR_STRING_MAX] = '\0';
    if (cap) snprintf(text, cap, "%s", words);
}

int wgml_mpi_errors_return(wgml_mpi_comm comm)
{
    return IS_OMPI ? ompi.Comm_set_errhandler(OMPI_COMM(comm), ompi.errors_return)
                   : mpich.Comm_set_errhandler(MPICH_COMM(comm), MPICH_ERRORS_RETURN);
}

int wgml_mpi_comm_rank(wgml_mpi_comm comm, int *rank)
{
    return IS_OMPI ? ompi.Comm_rank(OMPI_COMM(comm), rank) : mpich.Comm_rank(MPICH_COMM(comm), rank);
}

int wgml_mpi_comm_size(wgml_mpi_comm comm, int *size)
{
    return IS_OMPI ? ompi.Comm_size(OMPI_COMM(comm), size) : mpich.Comm_size(MPICH_COMM(comm), size);
}

int wgml_mpi_comm_split_shared(wgml_mpi_comm comm, int key, wgml_mpi_comm *local)
{
    int rc;
    if (IS_OMPI) {
        ompi_comm c = NULL;
        rc = ompi.Comm_split_type(OMPI_COMM(comm), OMPI_COMM_TYPE_SHARED, key, ompi.info_null, &c);
        local->h = (uintptr_t)c;
    } else {
        int c = 0;
        rc = mpich.Comm_split_type(MPICH_COMM(comm), MPICH_COMM_TYPE_SHARED, key, MPICH_INFO_NULL, &c);
        local->h = from_int(c);
    }
    return rc;
}

int wgml_mpi_comm_free(wgml_mpi_comm *comm)
{
    int rc;
    if (IS_OMPI) {
        ompi_comm c = OMPI_COMM(*comm);
        rc = ompi.Comm_free(&c);
        comm->h = (uintptr_t)c;
    } else {
        int c = MPICH_COMM(*comm);
        rc = mpich.Comm_free(&c);
        comm->h = from_int(c);
    }
    return rc;
}

int wgml_mpi_barrier(wgml_mpi_comm comm) { return IS_OMPI ? ompi.Barrier(OMPI_COMM(comm)) : mpich.Barrier(MPICH_COMM(comm)); }

int wgml_mpi_bcast(void *data, int count, wgml_mpi_type type, int root, wgml_mpi_comm comm)
{
    return IS_OMPI ? ompi.Bcast(data, count, ompi.types[type], root, OMPI_COMM(comm))
                   : mpich.Bcast(data, count, mpich_types[type], root, MPICH_COMM(comm));
}

int wgml_mpi_allreduce_sum(const void *send, void *recv, int count, wgml_mpi_type type, wgml_mpi_comm comm)
{
    if (IS_OMPI) return ompi.Allreduce(send ? send : OMPI_IN_PLACE, recv, count, ompi.types[type], ompi.sum, OMPI_COMM(comm));
    return mpich.Allreduce(send ? send : MPICH_IN_PLACE, recv, count, mpich_types[type], MPICH_SUM, MPICH_COMM(comm));
}

int wgml_mpi_iallreduce_sum(void *data, int count, wgml_mpi_type type, wgml_mpi_comm comm, wgml_mpi_request *req)
{
    int rc;
    if (IS_OMPI) {
        ompi_request r = NULL;
        rc = ompi.Iallreduce(OMPI_IN_PLACE, data, count, ompi.types[type], ompi.sum, OMPI_COMM(comm), &r);
        req->h = (uintptr_t)r;
    } else {
        int r = 0;
        rc = mpich.Iallreduce(MPICH_IN_PLACE, data, count, mpich_types[type], MPICH_SUM, MPICH_COMM(comm), &r);
        req->h = from_int(r);
    }
    req->active = rc == WGML_MPI_SUCCESS;
    return rc;
}

int wgml_mpi_wait(wgml_mpi_request *req)
{
    if (!req->active) return WGML_MPI_SUCCESS;
    int rc;
    if (IS_OMPI) {
        ompi_request r = (ompi_request)req->h;
        rc = ompi.Wait(&r, OMPI_STATUS_IGNORE);
    } else {
        int r = to_int(req->h);
        rc = mpich.Wait(&r, MPICH_STATUS_IGNORE);
    }
    req->active = false;
    return rc;
}
#endif
