/* Bare-metal runtime for the `spike` route: HTIF host calls, stdout, exit, vector unit, traps.
 *
 * Spike's front-end server (fesvr) proxies Linux-numbered syscalls written through the HTIF
 * `tohost`/`fromhost` words, so the program reads its inputs from and writes its outputs to
 * files on the host. picolibc's semihosting hangs on Spike, hence this HTIF layer.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "torchsim_runtime.h"

volatile uint64_t tohost __attribute__((aligned(64)));
volatile uint64_t fromhost __attribute__((aligned(64)));

enum { SYS_OPENAT = 56, SYS_CLOSE = 57, SYS_READ = 63, SYS_WRITE = 64 };
enum { AT_FDCWD = -100 };

/* fesvr syscall proxy: tohost = address of an 8-word block (device 0, command 0); the host
 * writes the return value into the block's first word and sets fromhost. */
static long htif_syscall(long number, long a0, long a1, long a2, long a3) {
    static volatile uint64_t block[8] __attribute__((aligned(64)));
    block[0] = number; block[1] = a0; block[2] = a1; block[3] = a2; block[4] = a3;
    __sync_synchronize();
    tohost = (uint64_t)(uintptr_t)block;
    while (fromhost == 0) {
    }
    fromhost = 0;
    __sync_synchronize();
    return (long)block[0];
}

long host_open(const char *path, int linux_flags) {
    /* fesvr's openat takes the path length including the NUL */
    return htif_syscall(SYS_OPENAT, AT_FDCWD, (long)path, (long)strlen(path) + 1, linux_flags);
}

long host_close(long fd) { return htif_syscall(SYS_CLOSE, fd, 0, 0, 0); }

long host_read_all(long fd, void *buffer, long nbytes) {
    char *cursor = buffer;
    while (nbytes > 0) {
        long got = htif_syscall(SYS_READ, fd, (long)cursor, nbytes, 0);
        if (got <= 0) return -1;
        cursor += got;
        nbytes -= got;
    }
    return 0;
}

long host_write_all(long fd, const void *buffer, long nbytes) {
    const char *cursor = buffer;
    while (nbytes > 0) {
        long put = htif_syscall(SYS_WRITE, fd, (long)cursor, nbytes, 0);
        if (put <= 0) return -1;
        cursor += put;
        nbytes -= put;
    }
    return 0;
}

/* stdout/stderr: line-buffered SYS_write to the host's fd 1 */
static char line[256];
static int line_length;

static void flush_line(void) {
    if (line_length) host_write_all(1, line, line_length);
    line_length = 0;
}

static int htif_putc(char c, FILE *file) {
    (void)file;
    line[line_length++] = c;
    if (c == '\n' || line_length == (int)sizeof line) flush_line();
    return (unsigned char)c;
}

static int htif_flush(FILE *file) {
    (void)file;
    flush_line();
    return 0;
}

static FILE htif_stream = FDEV_SETUP_STREAM(htif_putc, NULL, htif_flush, _FDEV_SETUP_WRITE);
FILE *const stdout = &htif_stream;
FILE *const stderr = &htif_stream;
FILE *const stdin = &htif_stream;

void _exit(int code) {
    flush_line();
    for (;;) tohost = ((uint64_t)code << 1) | 1; /* Spike exits with `code` */
}

/* picolibc's crt0 enables only the FPU (mstatus.FS); enable the vector unit (mstatus.VS). */
__attribute__((constructor(101))) static void enable_vector_unit(void) {
    unsigned long vs_initial = 1UL << 9;
    __asm__ volatile("csrs mstatus, %0" ::"r"(vs_initial));
}

/* Any exception (illegal instruction, access fault, ...) is reported and ends the run with
 * status 128 + mcause, which the route turns into a `crash`. */
void torchsim_trap(void) {
    unsigned long cause, epc, tval;
    __asm__ volatile("csrr %0, mcause; csrr %1, mepc; csrr %2, mtval" : "=r"(cause), "=r"(epc), "=r"(tval));
    printf("TORCHSIM trap mcause=%lu mepc=0x%lx mtval=0x%lx\n", cause, epc, tval);
    _exit(128 + (int)(cause & 0x3f));
}

__attribute__((naked, aligned(4))) static void trap_entry(void) { __asm__ volatile("j torchsim_trap"); }

__attribute__((constructor(101))) static void install_trap_handler(void) {
    __asm__ volatile("csrw mtvec, %0" ::"r"(trap_entry));
}

/* Runtime assertions in lowered code (e.g. an index out of range in a gather) print their
 * message with puts and call abort; picolibc's abort would need kill/getpid. */
void abort(void) {
    printf("TORCHSIM abort\n");
    _exit(134);
}
