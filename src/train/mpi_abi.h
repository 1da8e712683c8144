/*
 * wgml's own seam to MPI, for dist.c: no mpi.h anywhere, so one build speaks to whichever MPI
 * launched the process. MPI's C interface is standard but its binary interface is not: Open
 * MPI's handles are addresses of objects the library exports (ompi_mpi_comm_world, ...),
 * the MPICH family's (MPICH, Intel MPI, MVAPICH) are int constants (MPI_COMM_WORLD is
 * 0x44000000), and a few constants differ (MPI_COMM_TYPE_SHARED, MPI_STATUS_IGNORE,
 * MPI_MAX_ERROR_STRING). mpi_abi.c finds the library at run time, tells its family, and calls
 * each function through a pointer of that family's C type.
 *
 * Everything here returns MPI's own code (WGML_MPI_SUCCESS, 0 in both families); the state is
 * the process's (MPI is once per process).
 */
#ifndef WGML_TRAIN_MPI_ABI_H
#define WGML_TRAIN_MPI_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WGML_MPI_SUCCESS 0

typedef enum wgml_mpi_family {
    WGML_MPI_UNKNOWN = 0, /* not loaded, or a launcher we cannot tell */
    WGML_MPI_OPEN_MPI,
    WGML_MPI_MPICH, /* MPICH and its derivatives: Intel MPI, MVAPICH */
} wgml_mpi_family;

/* A communicator or request of either family: an Open MPI pointer or an MPICH int, held as
   an integer wide enough for both. A request that is not in flight has active false. */
typedef struct wgml_mpi_comm {
    uintptr_t h;
} wgml_mpi_comm;
typedef struct wgml_mpi_request {
    uintptr_t h;
    bool active;
} wgml_mpi_request;

/* The datatypes dist.c sends; every reduction is a sum (MPI_SUM) */
typedef enum wgml_mpi_type { WGML_MPI_BYTE, WGML_MPI_INT, WGML_MPI_INT64, WGML_MPI_FLOAT, WGML_MPI_DOUBLE } wgml_mpi_type;

/* The thread levels of MPI_Init_thread, in the standard's order (both families number them 0-3) */
enum { WGML_MPI_THREAD_SINGLE, WGML_MPI_THREAD_FUNNELED, WGML_MPI_THREAD_SERIALIZED, WGML_MPI_THREAD_MULTIPLE };

/* The family whose launcher set these variables (runtime/settings.c reads them) */
const char *wgml_mpi_family_name(wgml_mpi_family f);

/* Finds MPI, once per process (later calls keep the first found): the MPI in the process
   when a program links one, else `library` when not empty (WGML_MPI_LIBRARY), else the
   library of the launcher's family by its soname. False, with a message in
   wgml_mpi_error(), when none is found, or its family cannot be told. */
bool wgml_mpi_load(const char *library, wgml_mpi_family launcher);
const char *wgml_mpi_error(void);
wgml_mpi_family wgml_mpi_loaded_family(void);
const char *wgml_mpi_library(void); /* the file opened, or "the process" */

wgml_mpi_comm wgml_mpi_world(void);

int wgml_mpi_initialized(int *flag);
int wgml_mpi_init_thread(int required, int *provided);
int wgml_mpi_query_thread(int *provided);
int wgml_mpi_finalize(void);
int wgml_mpi_abort(wgml_mpi_comm comm, int code);
/* MPI's words for a code into text (always terminated) */
void wgml_mpi_error_string(int code, char *text, size_t cap);

int wgml_mpi_errors_return(wgml_mpi_comm comm); /* errors come back as codes, never abort */
int wgml_mpi_comm_rank(wgml_mpi_comm comm, int *rank);
int wgml_mpi_comm_size(wgml_mpi_comm comm, int *size);
/* The ranks of comm that share this machine's memory (MPI_COMM_TYPE_SHARED) */
int wgml_mpi_comm_split_shared(wgml_mpi_comm comm, int key, wgml_mpi_comm *local);
int wgml_mpi_comm_free(wgml_mpi_comm *comm);

int wgml_mpi_barrier(wgml_mpi_comm comm);
int wgml_mpi_bcast(void *data, int count, wgml_mpi_type type, int root, wgml_mpi_comm comm);
/* Sums over the ranks; send NULL: in place (MPI_IN_PLACE) */
int wgml_mpi_allreduce_sum(const void *send, void *recv, int count, wgml_mpi_type type, wgml_mpi_comm comm);
int wgml_mpi_iallreduce_sum(void *data, int count, wgml_mpi_type type, wgml_mpi_comm comm, wgml_mpi_request *req);
/* Waits for an active request (MPI_STATUS_IGNORE), then it is inactive; an inactive one: success */
int wgml_mpi_wait(wgml_mpi_request *req);

#endif
