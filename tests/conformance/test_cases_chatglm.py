"""The shipped ChatGLM-6B incremental cases (conformance/cases/chatglm.py): next_position_ids checked by hand
and against the last column of the full 2D ids.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_next_position_ids_by_hand(by_id):
    """Row 0 of the mixed batch: pad pad 11 [MASK] 12 [gMASK] <sop> 30 31 32: context 6, [gMASK] at 5."""
    c = by_id["chatglm_next_position_ids-mixed_masks_2d_step0"]
    assert c.expected["out"][0].tolist() == [[5], [10 - 6]]
    c3 = by_id["chatglm_next_position_ids-mixed_masks_2d_step3"]
    assert c3.expected["out"][0].tolist() == [[5], [13 - 6]]
    # row 2: [MASK] at 2 only, <sop> at 6; 1D [MASK] rows keep the mask position
    assert by_id["chatglm_next_position_ids-mixed_masks_1d_step0"].expected["out"][2].tolist() == [2]


def test_next_position_ids_match_the_last_column_of_full_2d_ids(by_id):
    """Released incremental rule: [mask_position, seq_len - context_length] is the last column of the full
    2D ids (docs/chatglm.md); in 1D every row (either mask kind) gets the mask position."""
    from rope_ref import chatglm

    for steps in (0, 3):
        for dim in ("2d", "1d"):
            c = by_id[f"chatglm_next_position_ids-mixed_masks_{dim}_step{steps}"]
            params = {k: v for k, v in c.params.items() if k != "position_encoding_2d"}
            full = chatglm.position_ids(c.inputs["input_ids"], position_encoding_2d=True, **params)
            last = full[:, :, -1:]
            want = last if dim == "2d" else last[:, 0, :]
            np.testing.assert_array_equal(c.expected["out"], want)
