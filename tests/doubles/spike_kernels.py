"""Hand-written Triton kernels of the triton-spike prototype, each with one launch: a masked
add, a 2-D transpose-like copy with runtime strides and offsets, and a 3-D grid probe that
writes num_programs and program_id (the adapter's calling convention for them)."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def strided2d_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
    tl.store(out_ptr + rm[:, None] * som + rn[None, :] * son, x * 2.0 + 1.0, mask=mask)


@triton.jit
def grid_probe_kernel(out_ptr):
    i = tl.program_id(0) + 10 * tl.program_id(1) + 100 * tl.program_id(2)
    tl.store(out_ptr + i * 3 + 0, tl.num_programs(0))
    tl.store(out_ptr + i * 3 + 1, tl.num_programs(1))
    tl.store(out_ptr + i * 3 + 2, tl.num_programs(2))
