from __future__ import annotations

import numpy as np


def test_default_embedder_is_offline_normalised_and_semantic(embedder):
    v = embedder.embed(["boil water", "heat the water until it boils", "grow an orange tree"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3
    assert embedder.embed([]).shape == (0, 384)
