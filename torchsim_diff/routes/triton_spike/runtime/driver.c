/* The launcher's device half: read one launch from in.bin, walk its grid, write every
 * storage back to out.bin. The host half (launcher.py) writes in.bin and reads out.bin.
 *
 * in.bin, little-endian int64 words, then bytes:
 *   magic, n_storages, n_pointers, n_scalars, grid x, grid y, grid z
 *   n_storages x storage size in bytes
 *   n_pointers x {storage index, byte offset of the view (storage offset x element size), elements reachable}
 *   n_scalars  x raw bits of the scalar argument
 *   the storages' bytes, one after the other
 * out.bin: the storages' bytes after the launch, in the same order.
 *
 * Programs run in Triton's order: x fastest, then y, then z; each gets num_programs and
 * program_id as the adapter's entry expects (see program.c). The instructions retired
 * around the grid walk are printed as TORCHSIM instret=N. Exit status as in spike_runtime/main.c.
 */
#include <stdint.h>
#include <stdio.h>

#include "torchsim_runtime.h"
#include "triton_spike.h"

#define MAGIC 0x5452495350494b45LL /* "TRISPIKE" */
#define MAX_STORAGES 64
#define MAX_POINTERS 64
#define MAX_SCALARS 64
/* Storages live in an arena past the linked image (ram is 0x81000000 + 256 MiB), inside
 * Spike's default 2 GiB of memory: no .bss to clear, whatever the storage sizes. */
#define ARENA ((uint8_t *)0xA0000000UL)
#define ARENA_BYTES 0x40000000L

enum { LINUX_O_RDONLY = 0, LINUX_O_WRONLY_CREAT_TRUNC = 01 | 0100 | 01000 };

static int64_t header[7];
static int64_t storage_bytes[MAX_STORAGES];
static uint8_t *storage_at[MAX_STORAGES];
static int64_t pointer_table[MAX_POINTERS][3];
static int64_t scalars[MAX_SCALARS];
static struct memref1d pointers[MAX_POINTERS];
static uint8_t lock_bytes[64] __attribute__((aligned(64))), workspace_bytes[64] __attribute__((aligned(64)));
static struct memref1d lock = {lock_bytes, lock_bytes, 0, 64, 1}, workspace = {workspace_bytes, workspace_bytes, 0, 64, 1};

static inline uint64_t instructions_retired(void) {
    uint64_t count;
    __asm__ volatile("csrr %0, minstret" : "=r"(count));
    return count;
}

static void report_vector_length(void) {
#ifdef TORCHSIM_VECTOR /* vlenb traps without V */
    unsigned long vlenb;
    __asm__ volatile("csrr %0, 0xc22" : "=r"(vlenb));
    printf("TORCHSIM vlen=%lu\n", vlenb * 8);
#endif
}

static int fail(const char *what, int status) {
    printf("TORCHSIM error %s\n", what);
    return status;
}

static int read_launch(long fd) {
    if (host_read_all(fd, header, sizeof header) || header[0] != MAGIC) return -1;
    int64_t n_storages = header[1], n_pointers = header[2], n_scalars = header[3];
    if (n_storages > MAX_STORAGES || n_pointers > MAX_POINTERS || n_scalars > MAX_SCALARS) return -2;
    if (host_read_all(fd, storage_bytes, n_storages * 8) || host_read_all(fd, pointer_table, n_pointers * 24) ||
        host_read_all(fd, scalars, n_scalars * 8))
        return -1;
    int64_t cursor = 0;
    for (int64_t i = 0; i < n_storages; i++) {
        storage_at[i] = ARENA + cursor;
        cursor += (storage_bytes[i] + 63) & ~63L;
        if (cursor > ARENA_BYTES) return -2;
        if (host_read_all(fd, storage_at[i], storage_bytes[i])) return -1;
    }
    for (int64_t p = 0; p < n_pointers; p++) {
        uint8_t *base = storage_at[pointer_table[p][0]];
        pointers[p] = (struct memref1d){base, base + pointer_table[p][1], 0, pointer_table[p][2], 1};
    }
    return 0;
}

static int write_storages(void) {
    long fd = host_open("out.bin", LINUX_O_WRONLY_CREAT_TRUNC);
    if (fd < 0) return -1;
    for (int64_t i = 0; i < header[1]; i++)
        if (host_write_all(fd, storage_at[i], storage_bytes[i])) return -1;
    host_close(fd);
    return 0;
}

int main(void) {
    long fd = host_open("in.bin", LINUX_O_RDONLY);
    int status = fd < 0 ? -1 : read_launch(fd);
    if (status == -2) return fail("launch exceeds the driver's tables or arena", 3);
    if (status) return fail("cannot read in.bin", 3);
    host_close(fd);
    report_vector_length();
    const int32_t grid[3] = {(int32_t)header[4], (int32_t)header[5], (int32_t)header[6]};
    uint64_t before = instructions_retired();
    int32_t pid[3];
    for (pid[2] = 0; pid[2] < grid[2]; pid[2]++)
        for (pid[1] = 0; pid[1] < grid[1]; pid[1]++)
            for (pid[0] = 0; pid[0] < grid[0]; pid[0]++)
                triton_spike_program(&lock, &workspace, pointers, scalars, grid, pid);
    uint64_t after = instructions_retired();
    printf("TORCHSIM instret=%lu\n", (unsigned long)(after - before));
    if (write_storages()) return fail("cannot write out.bin", 4);
    printf("TORCHSIM done\n");
    return 0;
}
