/* Interface between the generated harness (harness.c), main.c and the HTIF runtime (htif.c). */
#ifndef TORCHSIM_RUNTIME_H
#define TORCHSIM_RUNTIME_H

#include <stdint.h>

long host_open(const char *path, int linux_flags);
long host_close(long fd);
long host_read_all(long fd, void *buffer, long nbytes);
long host_write_all(long fd, const void *buffer, long nbytes);

/* One buffer crossing the host boundary: inputs are read from in.bin in table order,
 * results are written to out.bin in table order. */
struct torchsim_buffer {
    void *data;
    long nbytes;
};

/* Provided by the generated harness.c */
extern struct torchsim_buffer torchsim_inputs[];
extern struct torchsim_buffer torchsim_results[];
extern const int torchsim_n_inputs;
extern const int torchsim_n_results;
void torchsim_call_kernel(void);

#endif
