"""TOGs of the routes' real kernels, built from a launch that route triton-spike recorded
(tests/fixtures/togsim/launch_addmm.json: a case's first kernel, with Spike's instret)."""
import copy
import json
import os

import pytest

from torchsim_diff.timing.kernel_togs import NotTimed, launch_tog, merged_dims
from torchsim_diff.timing.tog import Compute, ComputeKind, Load, Store, validate
from torchsim_diff.timing.tog_kernels import BASE_ADDRESS

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "togsim")


@pytest.fixture
def launch():
    with open(os.path.join(FIXTURES, "launch_addmm.json")) as handle:
        return json.load(handle)


def leaves(tog, kind):
    return [node for node, _ in tog.walk() if isinstance(node, kind)]


def test_a_recorded_launch_becomes_a_valid_tog_with_one_tile_per_program(launch):
    tog = validate(launch_tog(launch))
    assert tog.name == launch["kernel_name"] and tog.outer_tiles() == 1
    load, = leaves(tog, Load)
    store, = leaves(tog, Store)
    # in_ptr0 views buf0 as size [1, 3], stride [22, 3], offset 1: three floats 3 apart
    assert (load.tile_size, load.tile_stride, load.element_size) == ((3,), (3,), 4)
    assert (store.tile_size, store.tile_stride) == ((3,), (1,))


def test_addresses_are_the_buffers_laid_out_plus_each_views_offset(launch):
    tog = launch_tog(launch)
    assert tog.addresses["arg0"] == BASE_ADDRESS + 1 * 4            # storage_offset 1 float
    assert tog.addresses["arg1"] == BASE_ADDRESS + 4096             # buf1 on the next aligned page


def test_the_compute_costs_spikes_instructions_per_program(launch):
    launch = copy.deepcopy(launch)
    launch["grid"], launch["spike_instret"] = [4, 1, 1], 1000
    tog = launch_tog(launch)
    compute, = leaves(tog, Compute)
    assert (compute.cycles, compute.kind) == (250, ComputeKind.VECTOR)
    assert tog.outer_tiles() == 4 and tog.compute_occupancy()[ComputeKind.VECTOR] == 1000


def test_programs_split_the_leading_dim_and_step_by_their_share(launch):
    launch = copy.deepcopy(launch)
    launch["grid"] = [2, 1, 1]
    launch["args"][1].update(size=[8, 6], stride=[1, 8])          # a transposed output
    store, = leaves(launch_tog(launch), Store)
    assert (store.tile_size, store.tile_stride) == ((4, 6), (1, 8))
    assert store.loop_strides == (4 * 1 * 4,)                       # 4 rows of stride 1, 4 bytes each


def test_an_inout_argument_is_loaded_and_stored(launch):
    launch = copy.deepcopy(launch)
    launch["args"][0]["role"] = "inout"
    tog = launch_tog(launch)
    assert [n.buffer for n in leaves(tog, Load)] == ["arg0"]
    assert sorted(n.buffer for n in leaves(tog, Store)) == ["arg0", "arg1"]


def test_a_launch_that_did_not_run_on_spike_is_not_timed(launch):
    del launch["spike_instret"]
    with pytest.raises(NotTimed, match="no spike_instret"):
        launch_tog(launch)


@pytest.mark.parametrize("dtype", ["complex128", "float128x", "Tensor"])
def test_a_dtype_without_a_togsim_element_size_is_not_timed(launch, dtype):
    launch["args"][0]["dtype"] = dtype
    with pytest.raises(NotTimed, match=dtype):
        launch_tog(launch)


@pytest.mark.parametrize("dtype, size", [("uint8", 1), ("bfloat16", 2), ("int32", 4), ("float64", 8)])
def test_an_element_is_its_dtypes_size_in_bytes(launch, dtype, size):
    launch["args"][0]["dtype"] = dtype
    assert {n.element_size for n in leaves(launch_tog(launch), Load)} == {size}


@pytest.mark.parametrize("size, stride, merged", [
    ([2, 3, 4], [12, 4, 1], ((24, 1),)),                 # contiguous: one run
    ([4, 3], [1, 4], ((4, 1), (3, 4))),                  # transposed: two dims
    ([1, 5, 1], [5, 1, 1], ((5, 1),)),                   # size-1 dims dropped
    ([3, 4], [0, 1], ((3, 0), (4, 1))),                  # broadcast rows stay stride 0
    ([], [], ((1, 1),)),                                 # 0-d: one element
])
def test_merged_dims(size, stride, merged):
    assert merged_dims(size, stride) == merged
