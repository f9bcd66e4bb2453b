"""Sentence windows as a finer second level of both channels, studied offline with the honest
protocol (chosen on one fold of every dataset together, reported on the other, both ways).

    # 1. fusion_study.py's dumps (pools of today's channels), then once per dataset, no database,
    #    both cores (drcd-dev: 21,071 windows in 17 min):
    .venv/bin/python bench/window_study.py embed --dataset DIR --cache /tmp/fs [--width 160] [--stride sentence]
    # 2. as often as you like:
    .venv/bin/python bench/window_study.py evaluate --texts DATASETS_DIR --cache /tmp/fs /tmp/fs/*-dump.json
    # Window widths, the vector channel alone over a sub-corpus (every judged passage and a seeded
    # sample; `packed` windows as the engine cuts them, a text without Chinese 4 × as wide; given
    # two widths, also the passage blended with both best windows at once):
    .venv/bin/python bench/window_study.py widths --dataset DIR --cache /tmp/ws [--widths 24,96] [--sample 2000]

A passage's windows: its text cut after each sentence end (。！？!?；; or a line break; in a text
without Chinese characters also a full stop before a space: pipeline.windows), a sentence
longer than `--width` characters cut into pieces of that size, then from each piece on
(`--stride sentence`) or from the piece after the last window (`--stride packed`, no overlap)
the following pieces joined while they fit in `--width` characters; the title, when there is
one, on a line before each window, as the engine embeds a chunk under its chapter path. Each
window is embedded by e5-small (`E5Numpy`, `passage: `) and keyword-analysed as the engine does.

`evaluate` scores every candidate of today's top-50 pools (the dumps) four ways: the passage's
BM25 and cosine (the dumps' own), and its best window's BM25 (k1 0.9, b 0.4, idf and length over
the windows of the corpus) and cosine. It prints the channels alone, today's fusion, and two
families of today's convex fusion (today's per-query dense weight w, moved by `shift`) over
blended channels:
- dense = (1 − a) × minmax(passage cosine) + a × minmax(window cosine), keyword = (1 − b) ×
  BM25 / best + b × window BM25 / best window BM25: (a, b, shift);
- the same with a taken by query length: a_short below L query units, a_long from L on: (a_short,
  a_long, b, L).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fusion_study as fs

from apps.knowledge.pipeline.windows import sentence_pieces, window_spans


def windows(text: str, width: int, stride: str) -> list[str]:
    """`packed`: the engine's windows (pipeline.windows). `sentence`: a window from every
    sentence (or piece of one) on, joining the following ones while they fit."""
    if stride == "packed":
        return [text[start:end] for start, end in window_spans(text, width)]
    pieces = sentence_pieces(text, width)
    out: list[str] = []
    for first, (start, end) in enumerate(pieces):
        for _start, piece_end in pieces[first + 1:]:
            if piece_end - start > width:
                break
            end = piece_end
        if text[start:end] not in out:
            out.append(text[start:end])
    return out


def _corpus(dataset: Path) -> tuple[list[dict], dict[str, str]]:
    """(passages, {query id: text}) of a dataset, read by bench_retrieval's loader."""
    from apps.knowledge.management.commands.bench_retrieval import load_dataset

    corpus, queries, _qrels = load_dataset(dataset, None)
    return corpus, {q["id"]: q["text"] for q in queries}


def _windows_of(corpus: list[dict], width: int, stride: str) -> tuple[list[str], list[str]]:
    """(owner passage id, embedded text) of every window of the corpus."""
    owners, texts = [], []
    for passage in corpus:
        for window in windows(passage["text"], width, stride):
            owners.append(passage["id"])
            texts.append(fs._passage_text({**passage, "text": window}))
    return owners, texts


_E5 = None


def _encode(job: tuple[list[str], bool]) -> np.ndarray:
    global _E5
    if _E5 is None:
        from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

        _E5 = E5Numpy()
    texts, is_query = job
    return _E5.encode(texts, is_query=is_query, threads=1)


def _encode_all(texts: list[str], *, is_query: bool, processes: int = 2, batch: int = 64) -> np.ndarray:
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    jobs = [([texts[i] for i in order[s:s + batch]], is_query) for s in range(0, len(order), batch)]
    with Pool(processes) as pool:
        vectors = np.concatenate(pool.map(_encode, jobs))
    out = np.zeros_like(vectors)
    out[order] = vectors
    return out


def _encode_late(passages: list[dict]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(passage vectors, each passage's window vectors) from one forward pass of each passage."""
    global _E5
    if _E5 is None:
        from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

        _E5 = E5Numpy()
    texts = [fs._passage_text(p) for p in passages]
    spans = []
    for passage, text in zip(passages, texts, strict=True):
        at = len(text) - len(passage["text"])  # the title's line before the text
        spans.append([(at + start, at + end) for start, end in window_spans(passage["text"], passage["width"])])
    return _E5.encode_spans(texts, spans, threads=1)


def _encode_all_late(corpus: list[dict], width: int, processes: int = 2,
                     batch: int = 16) -> tuple[np.ndarray, np.ndarray]:
    order = sorted(range(len(corpus)), key=lambda i: len(corpus[i]["text"]))
    jobs = [[{**corpus[i], "width": width} for i in order[s:s + batch]] for s in range(0, len(order), batch)]
    with Pool(processes) as pool:
        results = pool.map(_encode_late, jobs)
    passages = np.zeros((len(corpus), 384), dtype=np.float32)
    windows_of: list[np.ndarray | None] = [None] * len(corpus)
    at = 0
    for vectors, spans in results:
        for vector, windows in zip(vectors, spans, strict=True):
            passages[order[at]], windows_of[order[at]] = vector, windows
            at += 1
    return passages, np.concatenate([w for w in windows_of if w is not None])


def _cache_names(cache: Path, name: str, width: int, stride: str) -> tuple[Path, Path]:
    return cache / f"{name}.e5q.npz", cache / f"{name}.win{width}{'' if stride == 'sentence' else stride}.npz"


def embed(dataset: Path, cache: Path, width: int, stride: str) -> None:
    from common import django_setup

    django_setup()
    corpus, queries = _corpus(dataset)
    query_path, window_path = _cache_names(cache, dataset.name, width, stride)
    if not query_path.exists():
        started = time.monotonic()
        ids = list(queries)
        np.savez(query_path, ids=np.array(ids), v=_encode_all([queries[i] for i in ids], is_query=True))
        print(f"{dataset.name}: {len(ids)} queries embedded in {time.monotonic() - started:.0f} s")
    owners, texts = _windows_of(corpus, width, "packed" if stride == "late" else stride)
    started = time.monotonic()
    if stride == "late":
        passages, vectors = _encode_all_late(corpus, width)
        if len(vectors) != len(owners):
            raise SystemExit(f"late chunking made {len(vectors)} windows, the cut {len(owners)}")
        np.savez(window_path, owner=np.array(owners), v=vectors, passage_ids=np.array([p["id"] for p in corpus]),
                 passages=passages)
        print(f"{dataset.name}: {len(corpus)} passages and their {len(owners)} windows embedded late in "
              f"{time.monotonic() - started:.0f} s -> {window_path}")
        return
    np.savez(window_path, owner=np.array(owners), v=_encode_all(texts, is_query=False))
    print(f"{dataset.name}: {len(texts)} windows of {len(corpus)} passages (mean {np.mean([len(t) for t in texts]):.0f}"
          f" characters) embedded in {time.monotonic() - started:.0f} s -> {window_path}")


def _window_scores(rows: list[dict], dataset: Path, cache: Path, width: int, stride: str) -> None:
    """Each query's pool, and per candidate its best window's cosine and BM25."""
    from apps.knowledge.pipeline.fusion import query_units
    from apps.knowledge.pipeline.keyword_channel import bm25, bm25_idf
    from apps.knowledge.pipeline.terms import keyword_terms

    corpus, queries = _corpus(dataset)
    owners, texts = _windows_of(corpus, width, stride)
    query_path, window_path = _cache_names(cache, dataset.name, width, stride)
    stored = np.load(window_path)
    if list(stored["owner"]) != owners:
        raise SystemExit(f"{window_path} was embedded from other windows: run embed again")
    vectors = stored["v"]
    stored_queries = np.load(query_path)
    query_vectors = dict(zip(stored_queries["ids"], stored_queries["v"], strict=True))
    of_passage: dict[str, list[int]] = {}
    for index, owner in enumerate(owners):
        of_passage.setdefault(owner, []).append(index)
    frequencies = [Counter(keyword_terms(t)) for t in texts]
    lengths = [sum(f.values()) for f in frequencies]
    average = sum(lengths) / len(lengths)
    df: Counter = Counter()
    for f in frequencies:
        df.update(f.keys())
    for q in rows:
        q["pool"] = fs._pool(q, 50)
        q["units"] = query_units(queries[q["id"]])
        idf = {t: bm25_idf(df[t], len(texts)) for t in set(keyword_terms(queries[q["id"]])) if df[t]}
        cosine, best_bm25 = [], []
        for candidate in q["pool"]:
            own = of_passage.get(candidate[0], [])
            cosine.append(float((vectors[own] @ query_vectors[q["id"]]).max()) if own else 0.0)
            best_bm25.append(max((bm25(tf=Counter({t: frequencies[i][t] for t in idf if t in frequencies[i]}),
                                       idf=idf, length=lengths[i], avg_length=average) for i in own), default=0.0))
        q["w_cos"], q["w_bm25"] = np.array(cosine), np.array(best_bm25)


def _blend(q: dict, a: float, b: float, shift: float) -> list[str]:
    pool = q["pool"]
    if not pool:
        return []
    passage_dense, passage_keyword = fs._convex_parts(*fs._channels(pool))
    window_dense, window_keyword = fs._convex_parts(q["w_bm25"], q["w_cos"])
    d = (1 - a) * passage_dense + a * window_dense
    k = (1 - b) * passage_keyword + b * window_keyword
    w = min(0.95, max(0.05, q["w"] + shift))
    return fs._ordered(pool, w * d + (1 - w) * k)


def evaluate(paths: list[Path], texts: Path, cache: Path, width: int, stride: str) -> None:
    from common import django_setup

    django_setup()
    sets = {}
    for path in paths:
        name = path.name.removesuffix(".json").removesuffix("-dump")
        rows = json.loads(path.read_text(encoding="utf-8"))
        for q in rows:
            q["rel"] = set(q["rel"])
        _window_scores(rows, texts / name, cache, width, stride)
        sets[name] = {f: [q for q in rows if q["fold"] == f] for f in "AB"}

    def run(rank) -> dict:
        return {n: {f: np.mean([fs._metrics(rank(q), q["rel"]) for q in sets[n][f]], axis=0) for f in "AB"}
                for n in sets}

    def fmt(r: np.ndarray) -> str:
        return f"{r[0]:.4f}/{r[1]:.4f}/{r[2]:.4f}"

    print(f"windows of {width} characters, stride {stride}; nDCG@10/Recall@10/MRR@10 over today's top-50 pools")
    singles = {
        "keyword (passage BM25)": lambda q: fs._ordered(q["pool"], fs._channels(q["pool"])[0]),
        "keyword (best window BM25)": lambda q: fs._ordered(q["pool"], q["w_bm25"]),
        "vector (passage cosine)": lambda q: fs._ordered(q["pool"], fs._channels(q["pool"])[1]),
        "vector (best window cosine)": lambda q: fs._ordered(q["pool"], q["w_cos"]),
        "hybrid today": lambda q: _blend(q, 0, 0, 0),
    }
    for label, rank in singles.items():
        figures = run(rank)
        print(f"  {label:<28} " + "  ".join(f"{n} A {fmt(figures[n]['A'])} B {fmt(figures[n]['B'])}" for n in sets))
    families = {
        "blend (a, b, shift)": [((a, b, s), lambda q, a=a, b=b, s=s: _blend(q, a, b, s))
                                for a in (0, .25, .5, .75, 1) for b in (0, .25, .5, .75, 1) for s in (-.1, 0, .1)],
        "gated (a_short, a_long, b, L)": [
            ((a_s, a_l, b, L), lambda q, a_s=a_s, a_l=a_l, b=b, L=L: _blend(q, a_s if q["units"] < L else a_l, b, 0))
            for a_s in (0, .25, .5) for a_l in (.5, .75, 1) for b in (0, .5, .75, 1) for L in (10, 12, 14, 16)],
    }
    for family, variants in families.items():
        results = [(label, run(rank)) for label, rank in variants]
        for tuned, held in (("A", "B"), ("B", "A")):
            # Ties go to the variant listed first.
            label, figures = max(results, key=lambda r: np.mean([r[1][n][tuned][0] for n in sets]))
            print(f"{family:<30} chosen on {tuned} {label} -> held-out {held}: "
                  + "  ".join(f"{n} {fmt(figures[n][held])}" for n in sets))


def exact(dataset: Path, cache: Path, width: int) -> None:
    """The vector channel alone over the whole corpus (no pools, no database): each passage by its
    own cosine, by its best window's (explicit windows, `packed`), by its best late-chunked
    window's, and by the mean of its cosine and its best window's."""
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import load_dataset
    corpus, queries, qrels = load_dataset(dataset, None)
    query_path, packed_path = _cache_names(cache, dataset.name, width, "packed")
    late = np.load(_cache_names(cache, dataset.name, width, "late")[1])
    passage_ids = list(late["passage_ids"])
    index_of = {pid: i for i, pid in enumerate(passage_ids)}
    stored = np.load(query_path)
    query_vectors = dict(zip(stored["ids"], stored["v"], strict=True))
    passage_cos = {q["id"]: late["passages"] @ query_vectors[q["id"]] for q in queries}

    def best_window(path: Path) -> dict[str, np.ndarray]:
        data = np.load(path)
        owners = [index_of[o] for o in data["owner"]]
        return {q["id"]: best_window_cosines(len(passage_ids), owners, data["v"], query_vectors[q["id"]])
                for q in queries}

    scores = {"passage cosine": passage_cos}
    for label, path in (("best explicit window", packed_path), ("best late window", None)):
        if path is not None and not path.exists():
            continue
        windows = best_window(path or _cache_names(cache, dataset.name, width, "late")[1])
        scores[label] = windows
        scores[f"mean(passage, {label})"] = {q: (passage_cos[q] + windows[q]) / 2 for q in windows}
    print(f"{dataset.name}: {len(corpus)} passages, {len(queries)} queries, windows of {width} characters;"
          " nDCG@10 / Recall@10 / MRR@10 over the whole corpus")
    for label, by_query in scores.items():
        print(f"  {label:<36} {_fold_figures(by_query, queries, passage_ids, qrels)}")


def best_window_cosines(count: int, owners: list[int], windows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each of `count` passages' best window cosine to `query` (-1 for a passage without windows);
    `owners[i]` is the passage index of window i."""
    best = np.full(count, -1.0, dtype=np.float32)
    np.maximum.at(best, np.asarray(owners, dtype=np.int64), windows @ query)
    return best


def fold_means(by_query: dict[str, np.ndarray], queries: list[dict], ids: list[str],
               qrels: dict) -> dict[str, np.ndarray]:
    """{fold: mean (nDCG@10, Recall@10, MRR@10)} of the passages ranked by each query's scores
    (ties in the passages' order)."""
    from apps.knowledge.management.commands.bench_retrieval import fold_of, metrics

    rows: dict[str, list] = {}
    for q in queries:
        ranked = [ids[i] for i in np.argsort(-by_query[q["id"]], kind="stable")[:10]]
        rows.setdefault(fold_of(q["id"]), []).append(metrics(ranked, qrels[q["id"]]))
    return {fold: np.mean(rows[fold], axis=0) for fold in sorted(rows)}


def format_means(means: dict[str, np.ndarray]) -> str:
    return "  ".join(f"{fold} " + "/".join(f"{x:.4f}" for x in figures) for fold, figures in means.items())


def _fold_figures(by_query: dict[str, np.ndarray], queries: list[dict], ids: list[str], qrels: dict) -> str:
    """nDCG@10 / Recall@10 / MRR@10 per fold of the passages ranked by each query's scores."""
    return format_means(fold_means(by_query, queries, ids, qrels))


def held_out(means: dict, cells: list, label: Callable[[Any], str]) -> None:
    """For each fold, the cell of `means` ({cell: fold_means}) with the best nDCG@10 on it, and
    that cell's nDCG@10 on the other fold."""
    for tune, report in (("A", "B"), ("B", "A")):
        best = max(cells, key=lambda cell: means[cell][tune][0])
        print(f"    chosen on {tune}: {label(best)} -> {report} {means[best][report][0]:.4f}")


# Two widths at once: (1 − share) × passage cosine + share × ((1 − mix) × the first width's best
# window + mix × the second's), each pair chosen on one fold and reported on the other.
TWO_WIDTH_SHARES = (0.5, 0.75, 1.0)
TWO_WIDTH_MIXES = (0.0, 0.25, 0.5, 0.75, 1.0)


def window_blend(first: np.ndarray, second: np.ndarray, mix: float) -> np.ndarray:
    """The best windows of two widths as one: (1 − mix) × the first's + mix × the second's."""
    return (1 - mix) * first + mix * second


def two_width_scores(own: np.ndarray, first: np.ndarray, second: np.ndarray, share: float, mix: float) -> np.ndarray:
    return (1 - share) * own + share * window_blend(first, second, mix)


def _two_widths(own: dict[str, np.ndarray], best: dict[int, dict[str, np.ndarray]], queries: list[dict],
                ids: list[str], qrels: dict) -> None:
    first, second = best
    print(f"  both widths: (1 - s) x passage + s x ((1 - m) x best window {first} + m x best window {second})")
    means = {}
    for share in TWO_WIDTH_SHARES:
        for mix in TWO_WIDTH_MIXES:
            by_query = {q: two_width_scores(own[q], best[first][q], best[second][q], share, mix) for q in own}
            means[(share, mix)] = fold_means(by_query, queries, ids, qrels)
            print(f"    {f's {share}, m {mix}':<16} " + format_means(means[(share, mix)]))
    held_out(means, list(means), lambda cell: f"s {cell[0]}, m {cell[1]}")


def sub_corpus(corpus: list[dict], qrels: dict[str, dict], size: int, seed: int = 7) -> list[dict]:
    """Every judged passage, then a seeded sample of the others up to `size` passages, in the
    corpus's order (a corpus too big to embed whole for a study)."""
    judged = {passage for relevant in qrels.values() for passage in relevant}
    others = [p["id"] for p in corpus if p["id"] not in judged]
    random.Random(seed).shuffle(others)
    keep = judged | set(others[:max(0, size - len(judged & {p["id"] for p in corpus}))])
    return [p for p in corpus if p["id"] in keep]


def texts_digest(texts: list[str]) -> str:
    """A short digest of `texts` in order: a cache file named by it holds their vectors, so a
    change in how windows are cut can never read another cut's."""
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]


def width_scores(passages: np.ndarray, owners: list[int], windows: np.ndarray,
                 query: np.ndarray) -> dict[str, np.ndarray]:
    """One query's score of every passage: its own cosine, its best window's (-1 without one), and
    the mean of the two."""
    own = passages @ query
    best = best_window_cosines(len(passages), owners, windows, query)
    return {"passage": own, "best window": best, "mean(passage, best window)": (own + best) / 2}


def widths(dataset: Path, cache: Path, sizes: list[int], sample: int) -> None:
    """The vector channel alone over a sub-corpus (sub_corpus), each passage by its own cosine, its
    best window's and their mean, for windows cut at each width as the engine cuts them (a text
    without Chinese characters 4 × as wide): what a width costs in texts and buys in ranking."""
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import load_dataset
    corpus, queries, qrels = load_dataset(dataset, None)
    sub = sub_corpus(corpus, qrels, sample)
    ids = [p["id"] for p in sub]
    index = {pid: i for i, pid in enumerate(ids)}
    name = f"{dataset.name}-sub{sample}"

    def embedded(tag: str, texts: list[str], is_query: bool = False) -> np.ndarray:
        path = cache / f"{name}.{tag}-{texts_digest(texts)}.npy"
        if not path.exists():
            started = time.monotonic()
            np.save(path, _encode_all(texts, is_query=is_query, batch=32))
            print(f"{tag}: {len(texts)} texts embedded in {time.monotonic() - started:.0f} s", flush=True)
        return np.load(path)

    query_vectors = dict(zip([q["id"] for q in queries],
                             embedded("queries", [q["text"] for q in queries], is_query=True), strict=True))
    passages = embedded("passages", [fs._passage_text(p) for p in sub])
    print(f"{name}: {len(sub)} passages, {len(queries)} queries; nDCG@10 / Recall@10 / MRR@10 over the sub-corpus")
    best: dict[int, dict[str, np.ndarray]] = {}
    for width in sizes:
        owners, texts = _windows_of(sub, width, "packed")
        vectors = embedded(f"win{width}", texts)
        at = [index[o] for o in owners]
        by_label: dict[str, dict[str, np.ndarray]] = {}
        for q in queries:
            for label, scores in width_scores(passages, at, vectors, query_vectors[q["id"]]).items():
                by_label.setdefault(label, {})[q["id"]] = scores
        print(f"  width {width}: {len(texts)} windows, {np.mean([len(t) for t in texts]):.0f} characters on average")
        for label, by_query in by_label.items():
            print(f"    {label:<28} {_fold_figures(by_query, queries, ids, qrels)}")
        best[width] = by_label["best window"]
    if len(best) == 2:
        _two_widths(by_label["passage"], best, queries, ids, qrels)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("embed", "evaluate", "exact", "widths"):
        p = sub.add_parser(name)
        p.add_argument("--cache", type=Path, required=True, help="where the window and query vectors are kept")
        p.add_argument("--width", type=int, default=160)
        p.add_argument("--stride", choices=("sentence", "packed", "late"), default="sentence",
                       help="late: packed windows pooled from their passage's own forward pass")
        if name == "evaluate":
            p.add_argument("--texts", type=Path, required=True, metavar="DATASETS_DIR")
            p.add_argument("dumps", type=Path, nargs="+")
        else:
            p.add_argument("--dataset", type=Path, required=True)
        if name == "widths":
            p.add_argument("--widths", default="24,96", help="KNOWLEDGE_WINDOW_CHARS values, comma-separated")
            p.add_argument("--sample", type=int, default=2000, help="passages in the sub-corpus")
    return parser


def main() -> None:
    args = parser().parse_args()
    if args.command == "embed":
        embed(args.dataset, args.cache, args.width, args.stride)
    elif args.command == "exact":
        exact(args.dataset, args.cache, args.width)
    elif args.command == "widths":
        widths(args.dataset, args.cache, [int(w) for w in args.widths.split(",")], args.sample)
    else:
        evaluate(args.dumps, args.texts, args.cache, args.width, args.stride)


if __name__ == "__main__":
    main()
