/* memrefCopy: the one MLIR runner-utils function the lowered kernels call (memref.copy
 * between layouts that are not both identity, e.g. the adapter's tile copy-in/out).
 * A bare-metal re-implementation over unranked descriptors
 * {allocated, aligned, offset, sizes[rank], strides[rank]}. */
#include <stdint.h>
#include <string.h>

struct unranked { int64_t rank; void *descriptor; };

static void copy_rows(int64_t rank, const int64_t *sizes, const int64_t *src_strides, const int64_t *dst_strides,
                      char *src, char *dst, int64_t elem) {
    if (rank == 0) { memcpy(dst, src, elem); return; }
    if (rank == 1 && src_strides[0] == 1 && dst_strides[0] == 1) { memcpy(dst, src, sizes[0] * elem); return; }
    for (int64_t i = 0; i < sizes[0]; i++)
        copy_rows(rank - 1, sizes + 1, src_strides + 1, dst_strides + 1,
                  src + i * src_strides[0] * elem, dst + i * dst_strides[0] * elem, elem);
}

void memrefCopy(int64_t elem, struct unranked *src, struct unranked *dst) {
    int64_t rank = src->rank;
    char **s = (char **)src->descriptor, **d = (char **)dst->descriptor;
    const int64_t *s_meta = (const int64_t *)(s + 2), *d_meta = (const int64_t *)(d + 2);
    const int64_t *sizes = s_meta + 1;
    for (int64_t r = 0; r < rank; r++) if (sizes[r] == 0) return;
    copy_rows(rank, sizes, s_meta + 1 + rank, d_meta + 1 + rank, s[1] + s_meta[0] * elem, d[1] + d_meta[0] * elem,
              elem);
}
