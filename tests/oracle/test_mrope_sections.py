"""M-RoPE sections (``rope_ref.mrope.section_streams``, ``mrope``, ``apply``) with distinct t, h, w sections.

Every check uses sections whose height and width counts differ (``[4, 7, 5]``, ``[7, 5, 4]``, ``[26, 20,
18]``), positions whose three streams differ, and expected streams or rotation matrices written from HF's
channel bookkeeping (``mrope_reference.hf_channel_streams`` / ``hf_rotation_matrix``), never from
``rope_ref``'s pair indices. The validation of ``section_streams`` is called at the helper.
"""

import numpy as np
import pytest
from mrope_reference import hf_channel_streams, hf_rotation_matrix

import rope_ref
from rope_ref import mrope, vision_rope


@pytest.mark.parametrize(
    ("sections", "n_pairs", "interleaved", "want"),
    [
        ([3, 2, 1], 6, False, (0, 0, 0, 1, 1, 2)),
        ([1, 3, 2], 6, False, (0, 1, 1, 1, 2, 2)),
        ([0, 2, 3], 5, False, (1, 1, 2, 2, 2)),
        ([3, 2, 1], 6, True, (0, 1, 2, 0, 1, 0)),
        ([2, 2, 2], 6, True, (0, 1, 2, 0, 1, 2)),
        ([4, 1, 2], 7, True, (0, 1, 2, 0, 0, 2, 0)),
        ((7, 5, 4), 16, True, (0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 0, 0)),
    ],
)
def test_section_streams_by_hand(sections, n_pairs, interleaved, want):
    assert mrope.section_streams(sections, n_pairs, interleaved=interleaved) == want
    assert mrope.section_streams(np.array(sections), n_pairs, interleaved=interleaved) == want


@pytest.mark.parametrize(
    ("sections", "interleaved"), [([26, 20, 18], True), ([16, 28, 20], False), ([8, 12, 44], False)]
)
def test_section_streams_follow_the_released_slicing(sections, interleaved):
    """Pair i of the half layout is channel i of HF's table: its stream is the pair's stream."""
    mode = "qwen3" if interleaved else "qwen2"
    want = tuple(hf_channel_streams(128, sections, mode)[:64])
    got = mrope.section_streams(sections, 64, interleaved=interleaved)
    assert got == want and [got.count(s) for s in range(3)] == list(sections)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (([-2, 34, 32], 64), {}, ValueError, "non-negative"),
        (([34, -2, 32], 64), {"interleaved": True}, ValueError, "non-negative"),
        (([16, 24], 40), {}, ValueError, "3 non-negative ints"),
        (([16, 24, 24, 0], 64), {}, ValueError, "3 non-negative ints"),
        (([16, 24, 23], 64), {}, ValueError, "sums to 63 but there are 64 rotary pairs"),
        (([16, 24, 25], 64), {"interleaved": True}, ValueError, "sums to 65"),
        (([20, 22, 22], 64), {"interleaved": True}, ValueError, "interleaved mrope_section"),
        (([16, 24, 24], 64), {"interleaved": True}, ValueError, "interleaved mrope_section"),
        (([0, 0, 0], 0), {}, ValueError, "n_pairs"),
        (("16,24,24", 64), {}, TypeError, "mrope_section must be a sequence"),
        ((16, 64), {}, TypeError, "mrope_section must be a sequence"),
    ],
)
def test_section_streams_refuses_bad_sections_at_the_helper(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        mrope.section_streams(*args, **kwargs)


def test_mrope_refuses_bad_arguments():
    cfg = rope_ref.RopeConfig(32, layout="half")
    with pytest.raises(TypeError, match="cfg must be a rope_ref.RopeConfig"):
        mrope.mrope({"head_dim": 32}, [4, 7, 5])
    with pytest.raises(TypeError, match="interleaved must be a bool"):
        mrope.mrope(cfg, [7, 5, 4], interleaved="yes")
    assert mrope.mrope(cfg, [7, 5, 4], interleaved=np.bool_(True)).streams == mrope.section_streams(
        [7, 5, 4], 16, interleaved=True
    )


def test_apply_wants_a_three_stream_spec():
    x, pos = np.ones((2, 16)), np.zeros((3, 2))
    with pytest.raises(TypeError, match="3-stream MultiAxisRope"):
        mrope.apply(x, pos[:2], vision_rope.qwen2_vl(16))
    with pytest.raises(TypeError, match="3-stream MultiAxisRope"):
        mrope.apply(x, pos, rope_ref.RopeConfig(16, layout="half"))


# (head_dim, rotary_dim, layout, base, sections, interleaved, mode): all with h != w sections.
SPECS = [
    (32, 32, "half", 500.0, (4, 7, 5), False, "qwen2"),
    (32, 32, "half", 5e6, (7, 5, 4), True, "qwen3"),
    (48, 32, "interleaved", 10000.0, (3, 6, 7), False, "glm4v"),
]


@pytest.mark.parametrize(
    ("head_dim", "rotary_dim", "layout", "base", "sections", "interleaved", "mode"), SPECS
)
def test_rotation_is_hf_channel_bookkeeping_as_a_matrix(
    head_dim, rotary_dim, layout, base, sections, interleaved, mode
):
    cfg = rope_ref.RopeConfig(head_dim, layout=layout, base=base, rotary_dim=rotary_dim)
    spec = mrope.mrope(cfg, sections, interleaved=interleaved)
    rng = np.random.default_rng(head_dim + sum(sections))
    x = rng.standard_normal((5, head_dim))
    pos = np.array([[0, 3, 40, 7, 900], [0, 11, 2, 300, 5], [0, 6, 29, 1000, 13]])  # t, h, w all differ
    got = mrope.apply(x, pos, spec)
    inv = [base ** (-2.0 * i / rotary_dim) for i in range(rotary_dim // 2)]
    streams = hf_channel_streams(rotary_dim, sections, mode, rotary_dim)
    for n in range(5):
        want = hf_rotation_matrix(head_dim, rotary_dim, pos[:, n], inv, streams, layout) @ x[n]
        np.testing.assert_allclose(got[n], want, rtol=0, atol=1e-12 * (1 + np.abs(x[n]).max()))
    assert np.array_equal(got[0], x[0]) and np.array_equal(got[:, rotary_dim:], x[:, rotary_dim:])
    # Each stream moves only its own pairs: a token differing only in h changes only the h channels.
    moved = mrope.apply(x[1], pos[:, 1] + [0, 5, 0], spec)
    h_channels = [c for c in range(rotary_dim) if streams[c] == 1]
    others = [c for c in range(head_dim) if c not in h_channels]
    assert np.array_equal(moved[others], got[1, others]) and not np.allclose(
        moved[h_channels], got[1, h_channels]
    )
