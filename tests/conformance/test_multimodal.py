"""The JSON form of multi-axis specs and MLA configs (conformance/multimodal.py): every preset round-trips."""

from __future__ import annotations

import pytest
from rope_ref.conformance import multimodal

from rope_ref import mla, mrope, multiaxis, vision_rope

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_spec_json_round_trips_every_preset():
    specs = [mrope.preset(n).rope for n in mrope.preset_names()]
    specs += [vision_rope.preset(n) for n in vision_rope.preset_names()]
    specs += [mla.preset(n).spec for n in mla.preset_names()] + [multiaxis.chatglm_2d(128)]
    for spec in specs:
        assert multimodal.spec_from_dict(multimodal.spec_to_dict(spec)) == spec
    for name in mla.preset_names():
        cfg = mla.preset(name)
        assert multimodal.mla_from_dict(multimodal.mla_to_dict(cfg)) == cfg
