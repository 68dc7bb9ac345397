"""ChatGLM-6B's 2D positions and rotation in torch (``backends/_torch_chatglm.py``).

Expected values are written out here: position ids by hand from the released ``get_position_ids``
(THUDM/chatglm-6b ``modeling_chatglm.py``), the float64 rotation as an explicit per-pair loop, and the
released fp16 arithmetic re-done step by step in NumPy float16.
"""

from __future__ import annotations

import numpy as np
import pytest
from chatglm_cases import (
    BAD_ROWS,
    BOS,
    GMASK,
    MASK,
    ROWS,
    ROWS_1D,
    ROWS_2D,
    TOKENS,
    fp16_tolerance,
    loop_2d,
    released_fp16,
)

import rope_ref

torch = pytest.importorskip("torch")
import rope_ref.backends.torch as rt  # noqa: E402  (after the torch availability check)


def randn(*shape: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def position_ids(ids, two_d: bool = True) -> list:
    return rt.chatglm_position_ids(torch.as_tensor(ids), **TOKENS, position_encoding_2d=two_d).tolist()


def test_chatglm_position_ids_hand_example():
    """zai-org/ChatGLM-6B #1313: ... [gMASK] <sop> a b c -> positions frozen at the [gMASK] index."""
    ids = torch.tensor([[5, 6, 7, 130001, 130004, 11, 12, 13]])
    out = rt.chatglm_position_ids(
        ids, bos_token_id=130004, mask_token_id=130000, gmask_token_id=130001, position_encoding_2d=True
    )
    assert out.tolist() == [[[0, 1, 2, 3, 3, 3, 3, 3], [0, 0, 0, 0, 1, 2, 3, 4]]]
    one_d = rt.chatglm_position_ids(
        ids, bos_token_id=130004, mask_token_id=130000, gmask_token_id=130001, position_encoding_2d=False
    )
    assert one_d.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]  # [gMASK] rows are not frozen in 1D
    with pytest.raises(ValueError, match="row 0 has no bos"):
        rt.chatglm_position_ids(
            ids[:, :4],
            bos_token_id=130004,
            mask_token_id=130000,
            gmask_token_id=130001,
            position_encoding_2d=True,
        )


def test_position_ids_per_row_by_hand():
    assert position_ids(ROWS) == ROWS_2D
    assert position_ids(ROWS, two_d=False) == ROWS_1D
    got = rt.chatglm_position_ids(torch.tensor(ROWS, dtype=torch.int32), **TOKENS, position_encoding_2d=True)
    assert got.dtype == torch.int64


@pytest.mark.parametrize(("rows", "message"), BAD_ROWS)
def test_position_ids_refuse_a_row_without_bos_or_mask(rows, message):
    with pytest.raises(ValueError, match=message):
        position_ids(rows)


def test_position_ids_refuse_bad_arrays_and_flags():
    with pytest.raises(
        TypeError, match="input_ids must be an integer tensor of token ids, got dtype torch.float32"
    ):
        position_ids(torch.tensor([[1.0, float(BOS), float(MASK)]]))
    with pytest.raises(TypeError, match="got dtype torch.bool"):
        position_ids(torch.tensor([[True, False]]))
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\), got shape \(3,\)"):
        position_ids([MASK, BOS, 1])
    with pytest.raises(ValueError, match=r"got shape \(1, 1, 3\)"):
        position_ids([[[MASK, BOS, 1]]])
    with pytest.raises(TypeError, match="position_encoding_2d must be a bool, got int"):
        rt.chatglm_position_ids(torch.tensor([[MASK, BOS]]), **TOKENS, position_encoding_2d=1)
    with pytest.raises(ValueError, match="must differ"):
        rt.chatglm_position_ids(
            torch.tensor([[MASK, BOS]]),
            bos_token_id=BOS,
            mask_token_id=BOS,
            gmask_token_id=GMASK,
            position_encoding_2d=True,
        )


def test_float64_path_is_two_half_head_ropes():
    x = randn(4, 3, 16, seed=1)
    pos = torch.tensor([0, 3, 7, 2])[:, None]
    blk = torch.tensor([5, 0, 1, 9])[:, None]
    base = 500.0
    y = rt.chatglm_apply_2d(x, pos, blk, base=base, precision="float64", angle_dtype=torch.float64)
    rows = x.reshape(-1, 16).numpy()
    want = loop_2d(rows, pos.expand(4, 3).reshape(-1).numpy(), blk.expand(4, 3).reshape(-1).numpy(), base)
    np.testing.assert_allclose(y.reshape(-1, 16).numpy(), want, rtol=0, atol=1e-14)


def test_fp16_path_is_the_released_arithmetic():
    x = randn(5, 16, seed=2)
    pos = torch.tensor([0, 1, 700, 2047, 9000])
    blk = torch.tensor([3, 0, 1, 2, 40])
    y = rt.chatglm_apply_2d(x, pos, blk, base=10000.0, precision="chatglm-6b-fp16")
    assert y.dtype == torch.float16
    want = released_fp16(x.numpy(), pos.numpy(), blk.numpy(), 10000.0)
    np.testing.assert_allclose(y.double().numpy(), want.astype(np.float64), rtol=0, atol=fp16_tolerance(want))


@pytest.mark.parametrize(
    ("pos", "message"),
    [
        (torch.tensor([0.0, 2.5, 1.0]), "position_ids must be integers under precision='chatglm-6b-fp16'"),
        (
            torch.tensor([0, 65505, 1]),
            r"position_ids must be in 0..65504 under precision='chatglm-6b-fp16', got 0..65505",
        ),
        (torch.tensor([0, -1, 1]), r"got -1..1"),
    ],
)
def test_fp16_path_refuses_positions_outside_the_table(pos, message):
    x = randn(3, 8, seed=3)
    ok = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=message):
        rt.chatglm_apply_2d(x, pos, ok, base=10000.0, precision="chatglm-6b-fp16")
    with pytest.raises(ValueError, match=message.replace("position_ids", "block_position_ids")):
        rt.chatglm_apply_2d(x, ok, pos, base=10000.0, precision="chatglm-6b-fp16")
    assert (
        rt.chatglm_apply_2d(
            x, torch.tensor([0.0, 65504.0, 3.0]), ok, base=10000.0, precision="chatglm-6b-fp16"
        ).dtype
        == torch.float16
    )


@pytest.mark.parametrize("precision", ["float64", "chatglm-6b-fp16"])
def test_shapes_are_checked_on_both_paths(precision):
    ids = torch.arange(3)
    with pytest.raises(ValueError, match=r"head_dim\) must be a multiple of 4, got x.shape=\(3, 6\)"):
        rt.chatglm_apply_2d(randn(3, 6), ids, ids, base=10000.0, precision=precision)
    x = randn(3, 8)
    with pytest.raises(ValueError, match=r"block_position_ids of shape \(4,\) does not broadcast"):
        rt.chatglm_apply_2d(x, ids, torch.arange(4), base=10000.0, precision=precision)
    with pytest.raises(ValueError, match=r"position_ids of shape \(2,\) does not broadcast"):
        rt.chatglm_apply_2d(x, torch.arange(2), ids, base=10000.0, precision=precision)
    with pytest.raises(ValueError, match="precision must be one of"):
        rt.chatglm_apply_2d(x, ids, ids, base=10000.0, precision="float16")


def test_chatglm_apply_2d_matches_oracle():
    x = randn(3, 2, 16)
    pos = torch.tensor([[0, 1, 2], [4, 4, 4]]).T
    blk = torch.tensor([[0, 0, 1], [0, 1, 2]]).T
    y = rt.chatglm_apply_2d(x, pos, blk, base=10000.0, precision="float64", angle_dtype=torch.float64)
    ref = rope_ref.chatglm.apply_2d(x.numpy(), pos.numpy(), blk.numpy(), precision="float64")
    np.testing.assert_allclose(y.numpy(), ref, atol=1e-12)
    y16 = rt.chatglm_apply_2d(x, pos * 500, blk, base=10000.0, precision="chatglm-6b-fp16")
    ref16 = rope_ref.chatglm.apply_2d(x.numpy(), pos.numpy() * 500, blk.numpy(), precision="chatglm-6b-fp16")
    assert y16.dtype == torch.float16
    # the oracle rounds cos/sin from float64, torch from its float32 kernels: at most 2 fp16 ulps apart
    np.testing.assert_allclose(y16.double().numpy(), ref16, atol=4e-3)


@pytest.mark.parametrize("precision", ["float64", "chatglm-6b-fp16"])
@pytest.mark.parametrize(
    ("option", "bad", "message"),
    [
        ("kernel", "cuda", "kernel must be one of"),
        ("angle_dtype", torch.float16, "angle_dtype must be"),
    ],
)
def test_chatglm_apply_2d_validates_options_on_both_paths(precision, option, bad, message):
    x = randn(3, 2, 16, dtype=torch.float32)
    ids = torch.arange(3)[:, None]
    with pytest.raises(ValueError, match=message):
        rt.chatglm_apply_2d(x, ids, ids, base=10000.0, precision=precision, **{option: bad})


@pytest.mark.parametrize("precision", ["float64", "chatglm-6b-fp16"])
@pytest.mark.parametrize("base", [1.0, 0.5, float("nan"), float("inf")])
def test_chatglm_apply_2d_refuses_bad_base_on_both_paths(precision, base):
    x = randn(3, 2, 16, dtype=torch.float32)
    ids = torch.arange(3)[:, None]
    with pytest.raises(ValueError, match="base"):
        rt.chatglm_apply_2d(x, ids, ids, base=base, precision=precision)


@pytest.mark.parametrize("bad", [130004.0, True, "130004"])
def test_chatglm_position_ids_refuses_non_integer_token_ids(bad):
    ids = torch.tensor([[5, 130001, 130004, 11]])
    with pytest.raises(TypeError, match="bos_token_id must be an int"):
        rt.chatglm_position_ids(
            ids, bos_token_id=bad, mask_token_id=130000, gmask_token_id=130001, position_encoding_2d=True
        )


def test_chatglm_fp16_emulation_refuses_compute_dtype():
    x = randn(3, 2, 16, dtype=torch.float32)
    ids = torch.arange(3)[:, None]
    with pytest.raises(ValueError, match="compute_dtype applies only to precision='float64'"):
        rt.chatglm_apply_2d(x, ids, ids, base=10000.0, precision="chatglm-6b-fp16", compute_dtype="float32")
