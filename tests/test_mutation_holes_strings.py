"""Issue 21: strings that reach the code from JSON, a CLI or a user are equal to the code's literals but
not the same objects. Every option must be compared by value (a `==` mutated into `is` must fail here).

Each test runs the same call twice, once with interned strings (what literals in the source are) and
once with fresh copies, and demands the same outcome.
"""

from __future__ import annotations

import json

import pytest

from rope_ref import RopeConfig


def test_hf_dynamic_config_read_from_json_needs_max_position_embeddings():
    raw = json.loads(
        '{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, '
        '"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}'
    )
    message = r"missing the key 'max_position_embeddings' \(needed by dynamic NTK\)"
    with pytest.raises(ValueError, match=message):
        RopeConfig.from_hf(raw)


