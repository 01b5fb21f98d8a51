"""Keras' text models (trainbench.frameworks.keras.models.text_classifier) call keras-hub's layers in two forms
that change the kernels but not the numbers: attention masked only when the data has padding, and BERT's
segment embedding looked up by selection (SegmentLookup), without the scatter-add that, with every token in one
segment, made one XLA kernel half of Keras-on-JAX BERT-Large's training step on an H100. Each check runs in a
child process with its Keras backend (Keras reads KERAS_BACKEND once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, child_env


def keras_child(script: str, backend: str, folder: Path) -> dict[str, Any]:
    """Run `script` under Keras on `backend`; it prints its findings as one JSON line, last."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
        env=child_env({"PYTHONPATH": str(ROOT / "src"), "KERAS_BACKEND": backend}),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    for case, found in keras_child(SEGMENT_CHECK, "jax", tmp_path).items():
        assert found["weights"] == [1, 1], case  # the lookup trains the Embedding's own table, nothing more
        assert found["output difference"] == 0.0, case  # a selection is exact in any dtype
        assert found["gradient difference"] <= 1e-5 * found["gradient scale"], (case, found)  # summed in another order
        gathered, selected = found["scatters"]
        assert gathered > 0 and selected == 0, case


MASK_CHECK = """
import json, sys
import keras, numpy as np
from trainbench.config.schema import TransformerModel
from trainbench.frameworks.keras import models
found = {}
for family in ("bert", "distilbert"):
    cfg = TransformerModel(name=family, family=family, num_layers=2, hidden_size=32, num_heads=2,
                           intermediate_size=64, vocab_size=1100, max_position_embeddings=64, seq_len=16, num_labels=3)
    built = []
    for mask in (True, False):
        keras.utils.set_random_seed(0)
        built.append(models.text_classifier(cfg, 16, 3, mask_padding=mask))
    ids = np.random.default_rng(0).integers(1000, 1100, (4, 16)).astype("int32")  # no padding (id 0)
    logits = [keras.ops.convert_to_numpy(model(ids, training=False)) for model in built]
    found[family] = {"parameters": [models.count_trainable(model) for model in built],
                     "difference": float(np.abs(logits[0] - logits[1]).max()),
                     "mask_input": [any(type(op).__name__ == "NotEqual" for op in m.operations) for m in built]}
print(json.dumps(found))
"""


@pytest.mark.slow
def test_keras_text_models_mask_only_padded_data_and_compute_the_same_logits(tmp_path: Path) -> None:
    """~20 s: BERT and DistilBERT (2 tiny layers) built with and without the padding mask."""
    for family, found in keras_child(MASK_CHECK, "tensorflow", tmp_path).items():
        masked, unmasked = found["parameters"]
        assert masked == unmasked > 0, family
        assert found["difference"] == 0.0, family  # an all-true mask changes the kernels, not the result
        assert found["mask_input"] == [True, False], family  # the mask is computed only when asked for
