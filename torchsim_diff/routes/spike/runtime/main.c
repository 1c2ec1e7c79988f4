/* Driver of one kernel run on Spike: in.bin -> kernel -> out.bin, instructions retired on stdout.
 *
 * Exit status: 0 done, 3 cannot read in.bin, 4 cannot write out.bin, 128+mcause on a trap.
 * The route treats a status 0 without "TORCHSIM done" or without out.bin as a failure:
 * Spike also stops with status 0 when its --instructions budget runs out.
 */
#include <stdint.h>
#include <stdio.h>

#include "torchsim_runtime.h"

enum { LINUX_O_RDONLY = 0, LINUX_O_WRONLY_CREAT_TRUNC = 01 | 0100 | 01000 };

static inline uint64_t instructions_retired(void) {
    uint64_t count;
    __asm__ volatile("csrr %0, minstret" : "=r"(count));
    return count;
}

static int transfer(const char *path, int flags, struct torchsim_buffer *table, int count, int writing) {
    long fd = host_open(path, flags);
    if (fd < 0) return -1;
    for (int i = 0; i < count; i++) {
        long status = writing ? host_write_all(fd, table[i].data, table[i].nbytes)
                              : host_read_all(fd, table[i].data, table[i].nbytes);
        if (status < 0) return -1;
    }
    host_close(fd);
    return 0;
}

static void report_vector_length(void) {
#ifdef TORCHSIM_VECTOR /* set by the route when the ISA has V; vlenb traps without it */
    unsigned long vlenb;
    __asm__ volatile("csrr %0, 0xc22" : "=r"(vlenb)); /* vlenb */
    printf("TORCHSIM vlen=%lu\n", vlenb * 8);
#endif
}

int main(void) {
    if (transfer("in.bin", LINUX_O_RDONLY, torchsim_inputs, torchsim_n_inputs, 0)) {
        printf("TORCHSIM error cannot read in.bin\n");
        return 3;
    }
    report_vector_length();
    uint64_t before = instructions_retired();
    torchsim_call_kernel();
    uint64_t after = instructions_retired();
    printf("TORCHSIM instret=%lu\n", (unsigned long)(after - before));
    if (transfer("out.bin", LINUX_O_WRONLY_CREAT_TRUNC, torchsim_results, torchsim_n_results, 1)) {
        printf("TORCHSIM error cannot write out.bin\n");
        return 4;
    }
    printf("TORCHSIM done\n");
    return 0;
}
