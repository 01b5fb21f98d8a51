"""Text datasets: synthetic token sequences and SST-2's sentences, tokenised by hashing words onto BERT-like ids."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from trainbench.config.schema import SyntheticText
from trainbench.data.arrays import Split
from trainbench.data.files import DataFiles, dataset_files, fetch

# BERT's special token ids (bert-base-uncased vocabulary), kept so hashed text looks like WordPiece ids.
PAD_ID, UNK_ID, CLS_ID, SEP_ID = 0, 100, 101, 102
FIRST_WORD_ID = 1000  # ids below are BERT's special and unused tokens
MARKERS_PER_SEQUENCE = 8


def synthetic_text(cfg: SyntheticText, seed: int) -> tuple[Split, Split, int]:
    """Random token ids, [CLS] first; with `learnable`, each sequence hides a few marker tokens of its
    class (a bag-of-words rule any encoder learns in a few epochs)."""
    rng = np.random.default_rng(seed)
    seq_len, vocab, classes = cfg.seq_len, cfg.vocab_size, cfg.num_classes
    markers = FIRST_WORD_ID + np.arange(classes * 16).reshape(classes, 16)  # 16 marker ids per class

    def make(n: int) -> Split:
        tokens = rng.integers(FIRST_WORD_ID + markers.size, vocab, size=(n, seq_len), dtype=np.int64)
        tokens[:, 0] = CLS_ID
        labels = rng.integers(0, classes, size=n, dtype=np.int64)
        if cfg.learnable:
            count = min(MARKERS_PER_SEQUENCE, seq_len - 1)
            positions = 1 + np.argsort(rng.random((n, seq_len - 1)), axis=1)[:, :count]
            chosen = markers[labels[:, None], rng.integers(0, 16, size=(n, count))]
            np.put_along_axis(tokens, positions, chosen, axis=1)
        return Split(tokens, labels)

    return make(cfg.num_samples or 2048), make(cfg.num_val_samples or 0), classes


def sst2(root: Path, download: bool, seq_len: int, vocab_size: int) -> tuple[Split, Split, int]:
    """GLUE SST-2 from root/SST-2/{train,dev}.tsv, tokenised by hashing words (see tokenize)."""
    files = dataset_files("sst2", root)
    fetch(files, download)

    def read(name: str) -> Split:
        sentences, labels = sst2_rows(files, files.folder / name)
        return Split(tokenize(sentences, seq_len, vocab_size), np.asarray(labels, dtype=np.int64))

    return read("train.tsv"), read("dev.tsv"), 2


def sst2_rows(files: DataFiles, path: Path) -> tuple[list[str], list[int]]:
    """A GLUE TSV's sentences and labels: UTF-8, a header naming the `sentence` and `label` columns, then one
    row per sentence with a label 0 or 1. DatasetBroken names the file (and the line) that is not."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise files.broken(
            path, f"is not UTF-8 text (byte {error.start:,} is 0x{error.object[error.start]:02x})"
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last row
    if not lines:
        raise files.broken(path, "is empty")
    header = lines[0].rstrip("\r").split("\t")
    if "sentence" not in header or "label" not in header:
        raise files.broken(
            path,
            f"has no `sentence` and `label` columns: its first line is {lines[0][:60]!r} (GLUE's: sentence<TAB>label)",
        )
    text_column, label_column = header.index("sentence"), header.index("label")
    sentences, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.rstrip("\r").split("\t")
        if len(fields) <= max(text_column, label_column) or fields[label_column] not in ("0", "1"):
            where = "ends mid-row (truncated?): its last line" if number == len(lines) else f"line {number}"
            raise files.broken(path, f"{where} is {line[:60]!r}, not 'sentence<TAB>label' with label 0 or 1")
        sentences.append(fields[text_column])
        labels.append(int(fields[label_column]))
    return sentences, labels


def tokenize(sentences: list[str], seq_len: int, vocab_size: int) -> np.ndarray:
    """[CLS] w1 w2 ... [SEP] [PAD]...: lower-cased words hashed (stable across runs and machines) into
    the ids a BERT vocabulary uses for words. Offline and tokenizer-file free: what a speed benchmark
    needs; the accuracy it allows is below a real WordPiece tokenizer's."""
    ids = np.full((len(sentences), seq_len), PAD_ID, dtype=np.int64)
    span = vocab_size - FIRST_WORD_ID
    for row, sentence in enumerate(sentences):
        words = re.findall(r"[\w']+|[^\w\s]", sentence.lower())[: seq_len - 2]
        hashed = [
            FIRST_WORD_ID + int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "big") % span
            for w in words
        ]
        tokens = [CLS_ID, *hashed, SEP_ID]
        ids[row, : len(tokens)] = tokens
    return ids
