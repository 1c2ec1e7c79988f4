/* Interface between the grid-walking driver (driver.c) and the stub generated per kernel
 * specialisation (program.c), which calls the adapter's `_mlir_ciface_<kernel>` entry. */
#ifndef TRITON_SPIKE_H
#define TRITON_SPIKE_H

#include <stdint.h>

/* A rank-1 memref descriptor, what the adapter's entry takes for every pointer argument
 * (and for its lock and workspace arguments). `aligned` is the pointer the Triton kernel
 * sees: storage start + storage offset. */
struct memref1d {
    void *allocated;
    void *aligned;
    int64_t offset;
    int64_t size;
    int64_t stride;
};

/* Provided by program.c: one program of the grid. `pointers` holds one descriptor per
 * pointer argument, `scalars` the raw bits of each scalar argument (in argument order). */
void triton_spike_program(struct memref1d *lock, struct memref1d *workspace, struct memref1d *pointers,
                          const int64_t *scalars, const int32_t grid[3], const int32_t pid[3]);

#endif
