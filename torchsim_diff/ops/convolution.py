"""Convolutions (strided, dilated, grouped), pooling and interpolation over (N, C, spatial...)."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import BOOL, INT, INTS, one_of, optional


def _register(name, emit, build, rounding, signature):
    register(OpSpec(name, "matmul", emit, build, rounding=rounding, signature=signature))


def _window(b, size: int) -> dict:
    """Kernel, stride, padding and dilation that fit a spatial extent of `size`."""
    dilation = b.draw_int(1, 2) if size >= 3 else 1
    kernel = b.draw_int(1, max(1, min(5, (size - 1) // dilation + 1)))
    return {"kernel": kernel, "stride": b.draw_int(1, 3), "padding": b.draw_int(0, kernel // 2),
            "dilation": dilation}


def _build_conv(spatial: int):
    def build(b):
        x = b.value(exact_rank=2 + spatial)
        channels = b.shape(x)[1]
        sizes = b.shape(x)[2:]
        groups = b.draw_choice([g for g in (1, 2, 3, 4) if channels % g == 0])
        out_channels = groups * b.draw_int(1, 3)
        windows = [_window(b, s) for s in sizes]
        kernel = [w["kernel"] for w in windows]
        args = [x, b.value_of_shape([out_channels, channels // groups, *kernel])]
        if b.draw_bool():
            args.append(b.value_of_shape([out_channels]))
        attrs = {k: [w[k] for w in windows] for k in ("stride", "padding", "dilation")}
        return args, {**attrs, "groups": groups}
    return build


def _emit_conv(fn):
    def emit(args, attrs):
        bias = args[2] if len(args) == 3 else "None"
        return call(fn, [args[0], args[1], bias], stride=tuple(attrs["stride"]), padding=tuple(attrs["padding"]),
                    dilation=tuple(attrs["dilation"]), groups=attrs["groups"])
    return emit


CONV = {"stride": INTS, "padding": INTS, "dilation": INTS, "groups": INT}
MAX_POOL = {"kernel": INTS, "stride": INTS, "padding": INTS, "dilation": INTS, "ceil_mode": BOOL}
_register("conv1d", _emit_conv("torch.nn.functional.conv1d"), _build_conv(1), "contraction", CONV)
_register("conv2d", _emit_conv("torch.nn.functional.conv2d"), _build_conv(2), "contraction", CONV)


def _build_pool(spatial: int, dilated: bool):
    def build(b):
        x = b.value(min_rank=1 + spatial, max_rank=2 + spatial)
        windows = [_window(b, s) for s in b.shape(x)[-spatial:]]
        attrs = {k: [w[k] for w in windows] for k in ("kernel", "stride", "padding")}
        if dilated:
            attrs["dilation"] = [w["dilation"] for w in windows]
        return [x], {**attrs, "ceil_mode": b.draw_bool()}
    return build


def _emit_max_pool(fn):
    def emit(args, attrs):
        return call(fn, args, kernel_size=tuple(attrs["kernel"]), stride=tuple(attrs["stride"]),
                    padding=tuple(attrs["padding"]), dilation=tuple(attrs["dilation"]), ceil_mode=attrs["ceil_mode"])
    return emit


def _emit_avg_pool(args, attrs):
    return call("torch.nn.functional.avg_pool2d", args, kernel_size=tuple(attrs["kernel"]),
                stride=tuple(attrs["stride"]), padding=tuple(attrs["padding"]), ceil_mode=attrs["ceil_mode"])


_register("max_pool1d", _emit_max_pool("torch.nn.functional.max_pool1d"), _build_pool(1, dilated=True), "exact",
          MAX_POOL)
_register("max_pool2d", _emit_max_pool("torch.nn.functional.max_pool2d"), _build_pool(2, dilated=True), "exact",
          MAX_POOL)
_register("avg_pool2d", _emit_avg_pool, _build_pool(2, dilated=False), "contraction",
          {"kernel": INTS, "stride": INTS, "padding": INTS, "ceil_mode": BOOL})


def _build_adaptive(b):
    x = b.value(min_rank=3, max_rank=4)
    return [x], {"output_size": [b.draw_int(1, s) for s in b.shape(x)[-2:]]}


_register("adaptive_avg_pool2d",
          lambda a, k: call("torch.nn.functional.adaptive_avg_pool2d", a, output_size=tuple(k["output_size"])),
          _build_adaptive, "contraction", {"output_size": INTS})

# mode -> spatial rank of the input it takes
INTERPOLATE_MODES = {"nearest": 2, "bilinear": 2, "linear": 1, "nearest-exact": 1}


def _build_interpolate(b):
    mode = b.draw_choice(list(INTERPOLATE_MODES))
    x = b.value(exact_rank=2 + INTERPOLATE_MODES[mode])
    budget = max(1, b.max_numel // max(1, b.numel(x)))
    size = [b.draw_int(1, min(2 * s + 3, s * budget)) for s in b.shape(x)[2:]]
    attrs = {"size": size, "mode": mode}
    if mode in ("bilinear", "linear"):
        attrs["align_corners"] = b.draw_bool()
    return [x], attrs


def _emit_interpolate(args, attrs):
    extra = {"align_corners": attrs["align_corners"]} if "align_corners" in attrs else {}
    return call("torch.nn.functional.interpolate", args, size=tuple(attrs["size"]), mode=attrs["mode"], **extra)


_register("interpolate", _emit_interpolate, _build_interpolate, "contraction",
          {"size": INTS, "mode": one_of(*INTERPOLATE_MODES), "align_corners": optional(BOOL)})


# -- edges. Read from torch's docs (pooling's ceil_mode and padding, interpolate's modes and
# align_corners), the decompositions (upsample_nearest / bilinear, avg_pool2d's count_include_pad)
# and Inductor's lowerings (lowering.py: _adaptive_avg_pool2d is a copy when the output is the
# input, avg_pool2d when it divides it, a fallback past a window of 25; max_pool2d pads with -inf;
# convolution is an extern kernel that reads the input's layout, channels-last and stride 0 included).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value, values_of  # noqa: E402

CONV_EDGES = (ArgShape("depthwise"), ArgShape("grouped"), ArgShape("kernel 1"), ArgShape("stride > kernel"),
              ArgShape("padding"), ArgShape("dilation"), ArgShape("with bias"), Form(0, "permuted"),
              Form(0, "stride 0"), Form(1, "permuted"), Value(0, "inf"), Value(1, "nan"))
POOL_EDGES = (ArgShape("kernel 1"), ArgShape("stride > kernel"), ArgShape("padding"), ArgShape("ceil adds a window"),
              Form(0, "permuted"), *values_of(0, "inf", "nan"))
MAX_POOL_EDGES = (*POOL_EDGES, ArgShape("dilation"), *values_of(0, "-inf", "-0"))
declare_edges({
    "conv1d": CONV_EDGES,
    "conv2d": CONV_EDGES,
    "max_pool1d": MAX_POOL_EDGES,
    "max_pool2d": MAX_POOL_EDGES,
    "avg_pool2d": (*POOL_EDGES, Value(0, "max")),
    "adaptive_avg_pool2d": (ArgShape("output == input"), ArgShape("output divides input"),
                            ArgShape("window > 25 (fallback)"), Form(0, "permuted"), *values_of(0, "inf", "nan")),
    "interpolate": (*(ArgValue("mode", mode) for mode in INTERPOLATE_MODES), ArgValue("align_corners", True),
                    ArgShape("downsampling"), ArgShape("integer upscale"), ArgShape("same size"), Form(0, "permuted"),
                    *values_of(0, "inf", "nan")),
})
