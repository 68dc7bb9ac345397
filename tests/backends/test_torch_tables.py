"""The torch adapter's frequency and cos/sin tables (``backends/_torch_tables.py``), eager and on the paths
``torch.compile`` takes (reached by patching ``torch.compiler.is_compiling``). Expected values are written
out (inv_freq of head_dim 4, base 1e4: [1, 0.01]; HF's dynamic-NTK base), never taken from the module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")

import rope_ref.backends._torch_core as core  # noqa: E402

from rope_ref import DynamicNTK, Linear, RopeConfig, YaRN  # noqa: E402

CPU = torch.device("cpu")
CFG4 = RopeConfig(4, layout="half", base=10000.0)
DYN = RopeConfig(4, layout="half", base=10000.0, scaling=DynamicNTK(2.0, 64))
LINEAR = RopeConfig(4, layout="half", scaling=Linear(2.0))


def test_seq_len_of_follows_hf_dynamic_rope_update():
    pos = torch.tensor([5, 1000, 3])
    assert core.seq_len_of(pos, DYN, None) == 1001  # max + 1, not last + 1
    assert core.seq_len_of(torch.tensor([2.9, 7.6]), DYN, None) == 8  # floor of the maximum, + 1
    assert core.seq_len_of(torch.tensor([-9, -4]), DYN, None) == 1
    assert core.seq_len_of(pos, DYN, 50) == 50  # explicit wins
    assert core.seq_len_of(torch.zeros(0, dtype=torch.int64), DYN, None) is None
    assert core.seq_len_of(pos, CFG4, None) is None
    assert core.seq_len_of(pos, LINEAR, None) is None
    assert core.seq_len_of(pos, CFG4, 50) == 50


def test_freq_constants_and_table():
    freqs, factor = core.freq_constants(CFG4, None)
    assert freqs == (1.0, 0.01) and factor == 1.0
    assert all(type(v) is float for v in (*freqs, factor))
    # dynamic NTK at length 256 > 64: base' = 1e4 (2 * 256 / 64 - 1)^(4 / 2) = 490000, pair 1: 1 / 700
    freqs, _ = core.freq_constants(DYN, 256)
    assert freqs[0] == 1.0 and freqs[1] == pytest.approx(1 / 700, rel=1e-15)
    assert core.freq_constants(DYN, 32)[0] == (1.0, 0.01)  # within the trained length: unscaled
    # a length given to a length-free scaling never changes it
    assert core.freq_constants(CFG4, 10**6) == ((1.0, 0.01), 1.0)
    inv, fac = core.freq_table(CFG4, 123, torch.float32, CPU)
    assert inv.dtype == torch.float32 and inv.tolist() == [1.0, float(np.float32(0.01))] and fac == 1.0
    inv, fac = core.freq_table(DYN, 256, torch.float64, CPU)
    assert inv.tolist() == [1.0, pytest.approx(1 / 700, rel=1e-15)] and isinstance(fac, float)
    yarn = RopeConfig(4, layout="half", scaling=YaRN(4.0, 64, attention_factor=0.25))
    assert core.freq_table(yarn, None, torch.float64, CPU)[1] == 0.25


def test_length_free_drops_lengths_only_where_they_do_not_matter():
    assert core._length_free(CFG4, 300) is None
    assert core._length_free(LINEAR, 300) is None
    assert core._length_free(DYN, 300) == 300
    assert core._length_free(DYN, None) is None


def test_freq_table_under_compile_comes_from_the_custom_op(compiling):
    inv, fac = core.freq_table(DYN, 256, torch.float32, CPU)
    assert isinstance(fac, torch.Tensor) and fac.dtype == torch.float64 and fac.ndim == 0
    assert fac.item() == 1.0
    assert inv.dtype == torch.float32 and inv.shape == (2,)
    assert inv.tolist() == [1.0, float(np.float32(1 / 700))]
    # without a length (or for a length-free scaling) it is the plain table with a Python float factor
    inv, fac = core.freq_table(DYN, None, torch.float64, CPU)
    assert isinstance(fac, float) and inv.tolist() == [1.0, 0.01]
    inv, fac = core.freq_table(CFG4, 256, torch.float64, CPU)
    assert isinstance(fac, float) and inv.tolist() == [1.0, 0.01]


def test_custom_op_keys_and_fake_shape():
    k1, k2 = core._config_key(DYN), core._config_key(CFG4)
    assert k1 != k2 and core._config_key(DYN) == k1
    assert core._CONFIGS[k1] is DYN and core._CONFIGS[k2] is CFG4
    yarn = RopeConfig(4, layout="half", scaling=YaRN(4.0, 64, attention_factor=0.25))
    packed = core._freq_table_op(core._config_key(yarn), 1000, CPU)
    assert packed.dtype == torch.float64 and packed.shape == (3,) and packed[-1].item() == 0.25
    assert packed[0].item() == 1.0
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = core._freq_table_op(k1, 1000, CPU)
    assert fake.shape == (3,) and fake.dtype == torch.float64


@pytest.mark.parametrize("factor", [1.0, 0.5, 3.0])
def test_angle_tables_values_and_attention_factor(factor):
    pos = torch.tensor([0, 2, 9])
    inv = torch.tensor([1.0, 0.01], dtype=torch.float64)
    cos, sin = core.angle_tables(pos, inv, factor)
    assert cos.dtype == torch.float64 and cos.shape == (3, 2)
    ang = np.array([0.0, 2.0, 9.0])[:, None] * np.array([1.0, 0.01])
    np.testing.assert_allclose(cos.numpy(), factor * np.cos(ang), rtol=4e-16, atol=0)
    np.testing.assert_allclose(sin.numpy(), factor * np.sin(ang), rtol=4e-16, atol=1e-300)
    tcos, tsin = core.angle_tables(pos, inv.float(), torch.tensor(factor, dtype=torch.float64))
    assert tcos.dtype == torch.float32 and tsin.dtype == torch.float32
    np.testing.assert_allclose(tcos.numpy(), factor * np.cos(ang), rtol=4e-7, atol=0)
    np.testing.assert_allclose(tsin.numpy(), factor * np.sin(ang), rtol=4e-7, atol=1e-30)


def test_angle_tables_ignore_autocast_and_run_on_meta():
    pos = torch.tensor([3000])
    inv = torch.tensor([1.0], dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cos, _ = core.angle_tables(pos, inv, 1.0)
    assert cos.dtype == torch.float32 and cos.item() == pytest.approx(math.cos(3000.0), abs=4e-4)
    cos, sin = core.angle_tables(torch.zeros(2, 5, device="meta"), torch.zeros(3, device="meta"), 2.0)
    assert cos.shape == (2, 5, 3) and sin.device.type == "meta"


def test_expand_tables():
    c, s = torch.zeros(5, 3), torch.ones(5, 3)
    ec, es = core.expand_tables(c, s, 4)
    assert ec.shape == (1, 1, 5, 3) and es.shape == (1, 1, 5, 3) and es.sum().item() == 15
    assert core.expand_tables(c, s, 2)[0].shape == (5, 3)
    with pytest.raises(ValueError, match=r"cos/sin of shape \(5, 3\) have more axes than x \(1\)"):
        core.expand_tables(c, s, 1)


def test_length_dependent_tables_trace_into_one_graph():
    """torch.compile(fullgraph=True, dynamic=True): the table helpers must be constants or the custom op
    to Dynamo (no graph break, no host read); the compiled values equal the eager ones."""

    # A config no other test uses: its key is created while Dynamo traces (the first time it is seen).
    # (DYN's table in the other layout: same numbers, a different config.)
    fresh = RopeConfig(4, layout="interleaved", base=10000.0, scaling=DynamicNTK(2.0, 64))
    assert fresh not in core._CONFIG_KEYS

    def tables(pos, n):
        inv, fac = core.freq_table(fresh, n, torch.float64, pos.device)
        plain, _ = core.freq_table(CFG4, None, torch.float64, pos.device)
        cos, _ = core.angle_tables(pos, inv, fac)
        return cos, plain

    compiled = torch.compile(tables, backend="eager", fullgraph=True, dynamic=True)
    pos = torch.arange(6)
    for n in (256, 300):
        got_cos, got_plain = compiled(pos, n)
        want_cos, want_plain = tables(pos, n)
        assert torch.equal(got_cos, want_cos) and torch.equal(got_plain, want_plain)
    # pair 1 at length 300: base' = 1e4 (2 * 300 / 64 - 1)^2 = 701406.25, so cos(5 / 837.5)
    assert got_cos[5, 1].item() == pytest.approx(math.cos(5 / 837.5), rel=1e-15)


def test_angle_tables_convert_positions_to_the_table_dtype():
    """float64 positions with a float32 table give float32 angles (the positions are rounded first), not
    float64 ones by type promotion; 2**24 + 1 rounds to 2**24 in float32, so cos equals that of 2**24."""
    inv = torch.tensor([1.0], dtype=torch.float32)
    pos = torch.tensor([2.0**24 + 1, 2.0**24], dtype=torch.float64)
    cos, sin = core.angle_tables(pos, inv, 1.0)
    assert cos.dtype == torch.float32 and sin.dtype == torch.float32
    assert cos[0].item() == cos[1].item() and sin[0].item() == sin[1].item()


def test_autocast_off_turns_autocast_off_where_it_exists():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        with core.autocast_off("cpu"):
            assert not torch.is_autocast_enabled("cpu")
        assert torch.is_autocast_enabled("cpu")
    with core.autocast_off("meta"):  # no autocast on "meta": nothing to turn off, and no error
        pass
