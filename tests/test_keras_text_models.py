"""Keras' BERT looks its segment embedding up by selection (trainbench.frameworks.keras.models.SegmentLookup):
the same values and gradients as keras' Embedding gather, without the scatter-add that, with every token in one
segment, made one XLA kernel half of Keras-on-JAX BERT-Large's training step on an H100."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, child_env

SEGMENT_CHECK = """
import json
import jax, jax.numpy as jnp, keras, numpy as np
import trainbench.config.schema  # the package order run.py imports in (frameworks.keras needs config first)
from trainbench.frameworks.keras.models import SegmentLookup

found = {}
rng = np.random.default_rng(0)
upstream = rng.normal(size=(4, 16, 8)).astype("float32")
for policy in ("float32", "mixed_bfloat16"):
    embedding = keras.layers.Embedding(2, 8, dtype=policy)
    embedding.build((None, 16))
    lookup = SegmentLookup(embedding)
    lookup(np.zeros((4, 16), "int32"))  # built, as a functional model's call builds it
    table = jnp.asarray(rng.normal(size=(2, 8)).astype("float32"))

    def loss(layer, weights, ids):
        out, _ = layer.stateless_call([weights], [], ids)
        return jnp.sum(out.astype("float32") * upstream)

    for case, ids in (("mixed", rng.integers(0, 2, (4, 16))), ("all zero", np.zeros((4, 16), int))):
        ids = jnp.asarray(ids, dtype="int32")
        outputs = [np.asarray(layer.stateless_call([table], [], ids)[0], dtype="float32") for layer in (embedding, lookup)]
        gradients = [np.asarray(jax.grad(loss, argnums=1)(layer, table, ids)) for layer in (embedding, lookup)]
        programs = [jax.jit(jax.grad(lambda w, layer=layer: loss(layer, w, ids))).lower(table).as_text()
                    for layer in (embedding, lookup)]
        found[f"{policy} {case}"] = {
            "weights": [len(layer.trainable_weights) for layer in (embedding, lookup)],
            "output difference": float(np.abs(outputs[0] - outputs[1]).max()),
            "gradient difference": float(np.abs(gradients[0] - gradients[1]).max()),
            "gradient scale": float(np.abs(gradients[0]).max()),
            "scatters": [program.count("scatter") for program in programs],
        }
print(json.dumps(found))
"""


@pytest.mark.slow
def test_bert_segment_lookup_gives_the_gathers_values_and_gradients_without_a_scatter(tmp_path: Path) -> None:
    """~10 s, Keras on JAX: a 2-row segment table, tokens in both segments and all in segment 0."""
    done = subprocess.run(
        [sys.executable, "-c", SEGMENT_CHECK],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env({"PYTHONPATH": str(ROOT / "src"), "KERAS_BACKEND": "jax"}),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for case, found in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert found["weights"] == [1, 1], case  # the lookup trains the Embedding's own table, nothing more
        assert found["output difference"] == 0.0, case  # a selection is exact in any dtype
        assert found["gradient difference"] <= 1e-5 * found["gradient scale"], (case, found)  # summed in another order
        gathered, selected = found["scatters"]
        assert gathered > 0 and selected == 0, case
