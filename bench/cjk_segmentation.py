"""Does dictionary word segmentation (jieba) beside character bigrams help the keyword channel?
Measured offline with the honest protocol: the variant is chosen on one fold of the queries of all
CJK sets together and reported on the other fold, both ways.

    nice -n 15 .venv/bin/python bench/cjk_segmentation.py \
        [--datasets-dir ../shared/bench/datasets] [--datasets dureader-robust-a,cmrc2018-dev,drcd-dev] \
        [--weights 0.5,1,1.5,2] [--tf engine|analyzer] [--jieba-cache DIR]

No database. Each passage is one document (whole, title left out: the engine's chapter_path is
ignored here) and every query is scored by BM25 against the whole corpus (an exhaustive ranking,
not the engine's phase-1 pruning), exactly as the engine's `KeywordScorer` scores a candidate:
k1 = 0.9, b = 0.4, idf = log(1 + (N − df + 0.5)/(df + 0.5)), the query's distinct terms, the
document's length = its number of distinct terms (what `length(search_vector) - 1` counts), df
from the analyzer's terms. With `--tf engine` (the default) a term's frequency in a document is what
`term_frequencies` counts (a CJK term's substring count in the normalised text, a word's whole-word
count); with `--tf analyzer` it is the term's count in the analyzer's own output.

Analyzers (the CJK part differs; Western words are `keyword_terms`' stems in all of them):
- `today`: `keyword_terms` (CJK characters + overlapping bigrams);
- `today+cut`, `today+search`: today's terms plus the multi-character words jieba finds in each CJK
  run of the normalised text, by `jieba.cut(run, HMM=False)` or `jieba.cut_for_search(run)`;
- `jieba+uni/cut`, `jieba+uni/search`: those jieba words plus the characters, no bigrams.
Each jieba variant also comes with a query-side weight w on the query's terms that jieba found as
words (w × their BM25 contribution; `--weights`), a parameter chosen on the tuning fold like the
variant. The figure a variant is chosen on: the mean over the datasets of the fold's nDCG@10 (each
dataset counts the same); ties go to the earlier variant in the list above (today first).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASETS = "dureader-robust-a,cmrc2018-dev,drcd-dev"
K1, B = 0.9, 0.4


def _engine():
    """The engine's analyzer, metrics and folds (the command module needs Django set up)."""
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands import bench_retrieval
    from apps.knowledge.pipeline import keyword_channel, terms

    assert (keyword_channel.K1, keyword_channel.B) == (K1, B), "the engine's BM25 constants changed: update K1, B here"
    return terms, bench_retrieval


def _jieba(cache_dir: Path):
    """jieba's default tokenizer, its dictionary loaded from the package (no network), the parsed
    dictionary cached under `cache_dir` rather than the shared temp dir. Returns (tokenizer,
    seconds to load without the cache, seconds with it)."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as cold_dir:
        cold = jieba.Tokenizer()
        cold.tmp_dir = cold_dir
        started = time.perf_counter()
        cold.initialize()
        cold_s = time.perf_counter() - started
    jieba.dt.tmp_dir = str(cache_dir)
    jieba.dt.initialize()  # writes the cache on the first run
    warm = jieba.Tokenizer()
    warm.tmp_dir = str(cache_dir)
    started = time.perf_counter()
    warm.initialize()
    warm_s = time.perf_counter() - started
    return warm, cold_s, warm_s


class Analyzers:
    """Each variant: text → (terms in order with repeats, set of the terms jieba found as words)."""

    def __init__(self, terms_module, tokenizer):
        self.t = terms_module
        self.tok = tokenizer
        self.cjk = re.compile(f"[{terms_module.CJK_CHARS}]+")

    def _words(self, run: str, mode: str) -> list[str]:
        pieces = self.tok.cut(run, HMM=False) if mode == "cut" else self.tok.cut_for_search(run)
        return [w for w in pieces if len(w) > 1 and self.cjk.fullmatch(w)]

    def variants(self) -> dict[str, Callable[[str], tuple[list[str], set[str]]]]:
        return {
            "today": lambda text: (self.t.keyword_terms(text), set()),
            "today+cut": lambda text: self._beside(text, "cut", bigrams=True),
            "today+search": lambda text: self._beside(text, "search", bigrams=True),
            "jieba+uni/cut": lambda text: self._beside(text, "cut", bigrams=False),
            "jieba+uni/search": lambda text: self._beside(text, "search", bigrams=False),
        }

    def _beside(self, text: str, mode: str, *, bigrams: bool) -> tuple[list[str], set[str]]:
        normal = self.t.normalise(text)
        out: list[str] = []
        words: set[str] = set()
        for match in self.t._TOKEN.finditer(normal):
            run = match.group()
            if match.lastgroup == "cjk":
                out.extend(run)
                if bigrams:
                    out.extend(run[i : i + 2] for i in range(len(run) - 1))
                found = self._words(run, mode)
                out.extend(found)
                words.update(found)
            elif len(run) <= self.t.MAX_WORD_CHARS:
                out.append(self.t.word_term(run))
        return out, words


class Corpus:
    """One dataset's passages, normalised once; term frequencies as the engine counts them."""

    def __init__(self, terms_module, passages: list[dict]):
        self.t = terms_module
        self.ids = [p["id"] for p in passages]
        self.texts = [p["text"] for p in passages]
        self.normal = [terms_module.normalise(p["text"]) for p in passages]
        self.by_char: dict[str, set[int]] = defaultdict(set)
        self.words: dict[str, dict[int, int]] = defaultdict(dict)
        for doc, normal in enumerate(self.normal):
            for ch in set(normal):
                self.by_char[ch].add(doc)
            for word, n in Counter(terms_module.word_terms(normal)).items():
                self.words[word][doc] = n
        self._tf: dict[str, dict[int, int]] = {}

    def engine_tf(self, term: str) -> dict[int, int]:
        """{doc: frequency} of `term` as `term_frequencies` counts it, for every document."""
        found = self._tf.get(term)
        if found is None:
            if self.t.is_cjk_term(term):
                sets = sorted((self.by_char.get(ch, set()) for ch in set(term)), key=len)
                docs = set.intersection(*sets) if sets else set()
                found = {d: n for d in docs if (n := self.normal[d].count(term))}
            else:
                found = self.words.get(term, {})
            self._tf[term] = found
        return found


class Index:
    """One analyzer's BM25 statistics over one corpus."""

    def __init__(self, corpus: Corpus, analyze: Callable[[str], tuple[list[str], set[str]]], tf_mode: str):
        self.corpus, self.analyze, self.tf_mode = corpus, analyze, tf_mode
        started = time.perf_counter()
        analysed = [analyze(text)[0] for text in corpus.texts]
        self.seconds = time.perf_counter() - started
        self.df: Counter = Counter()
        self.postings: dict[str, dict[int, int]] = defaultdict(dict)
        self.length = []
        for doc, doc_terms in enumerate(analysed):
            counts = Counter(doc_terms)
            self.length.append(len(counts))
            self.df.update(counts.keys())
            if tf_mode == "analyzer":
                for term, n in counts.items():
                    self.postings[term][doc] = n
        self.n = len(analysed)
        self.avg_length = sum(self.length) / self.n

    def scores(self, query: str) -> tuple[dict[int, float], dict[int, float]]:
        """BM25 of every document with a query term, split in two: the contributions of the terms
        jieba did not find as words in the query, and of those it did."""
        terms, words = self.analyze(query)
        base: dict[int, float] = defaultdict(float)
        boosted: dict[int, float] = defaultdict(float)
        for term in dict.fromkeys(terms):
            df = self.df.get(term, 0)
            if df <= 0:
                continue
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            tf = self.corpus.engine_tf(term) if self.tf_mode == "engine" else self.postings.get(term, {})
            into = boosted if term in words else base
            for doc, n in tf.items():
                norm = K1 * (1 - B + B * self.length[doc] / self.avg_length)
                into[doc] += idf * n * (K1 + 1) / (n + norm)
        return base, boosted


def ranked(ids: list[str], base: dict[int, float], boosted: dict[int, float], weight: float) -> list[str]:
    docs = set(base) | set(boosted)
    scored = [(base.get(d, 0.0) + weight * boosted.get(d, 0.0), ids[d]) for d in docs]
    return [doc_id for score, doc_id in sorted(scored, key=lambda s: (-s[0], s[1])) if score > 0][:10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets-dir", default=str(ROOT.parent / "shared" / "bench" / "datasets"))
    parser.add_argument("--datasets", default=DEFAULT_DATASETS)
    parser.add_argument("--weights", default="0.5,1,1.5,2", help="query-side weights on jieba's words")
    parser.add_argument("--tf", choices=["engine", "analyzer"], default="engine")
    parser.add_argument("--jieba-cache", default=str(ROOT / "var" / "jieba"),
                        help="where jieba keeps its parsed dictionary (default: var/jieba, not the shared /tmp)")
    o = parser.parse_args()
    weights = [float(w) for w in o.weights.split(",")]
    terms_module, command = _engine()
    for qid in ("DEV_0_QUERY_0", "1147-5-1", "f1aafd23e0e12281770401586c8a4710"):  # the formula, restated
        assert command.fold_of(qid) == "AB"[hashlib.sha256(b"bailinghub-fold:" + qid.encode()).digest()[0] % 2]
    tokenizer, cold_s, warm_s = _jieba(Path(o.jieba_cache))
    print(f"jieba {__import__('jieba').__version__}: dictionary load {cold_s:.2f} s without its cache, "
          f"{warm_s:.2f} s with it ({o.jieba_cache}); tf mode: {o.tf}")
    variants = Analyzers(terms_module, tokenizer).variants()
    configs = [(name, 1.0) for name in variants]
    configs += [(name, w) for name in variants if name != "today" for w in weights if w != 1.0]
    configs.sort(key=lambda c: (list(variants).index(c[0]), c[1]))

    # results[dataset][fold][config] = (ndcg, recall, mrr) means; cost[dataset][variant] = (s, chars/s)
    results: dict[str, dict[str, dict[tuple, tuple]]] = {}
    cost: dict[str, dict[str, tuple[float, float]]] = {}
    for name in o.datasets.split(","):
        folder = Path(o.datasets_dir) / name
        passages, queries, qrels = command.load_dataset(folder, None)
        corpus = Corpus(terms_module, passages)
        chars = sum(len(t) for t in corpus.texts)
        per_fold: dict[str, dict[tuple, list]] = {"A": defaultdict(list), "B": defaultdict(list)}
        cost[name] = {}
        started = time.perf_counter()
        for variant, analyze in variants.items():
            index = Index(corpus, analyze, o.tf)
            cost[name][variant] = (index.seconds, chars / index.seconds)
            for q in queries:
                base, boosted = index.scores(q["text"])
                fold = command.fold_of(q["id"])
                for weight in ([1.0] if variant == "today" else sorted({1.0, *weights})):
                    top = ranked(corpus.ids, base, boosted, weight)
                    per_fold[fold][(variant, weight)].append(command.metrics(top, qrels[q["id"]]))
        results[name] = {
            fold: {c: tuple(statistics.fmean(m[i] for m in rows) for i in range(3)) for c, rows in got.items()}
            for fold, got in per_fold.items()
        }
        counts = {fold: len(next(iter(got.values()))) for fold, got in per_fold.items()}
        print(f"\n## {name}: {len(passages)} passages, {len(queries)} queries "
              f"(fold A {counts['A']}, B {counts['B']}), {time.perf_counter() - started:.0f} s")
        print("\n| variant | w | A nDCG@10 | A R@10 | A MRR@10 | B nDCG@10 | B R@10 | B MRR@10 |")
        print("|---|---|---|---|---|---|---|---|")
        for config in configs:
            a, b = results[name]["A"][config], results[name]["B"][config]
            print(f"| {config[0]} | {config[1]:g} | " + " | ".join(f"{x:.4f}" for x in (*a, *b)) + " |")

    names = list(results)
    print("\n## Chosen on one fold (mean nDCG@10 over the datasets), reported on the other")
    print("\n| tuned on → reported on | chosen | dataset | nDCG@10 | R@10 | MRR@10 | today nDCG@10 | Δ |")
    print("|---|---|---|---|---|---|---|---|")
    for tune, report in (("A", "B"), ("B", "A")):
        chosen = max(configs, key=lambda c: (statistics.fmean(results[n][tune][c][0] for n in names),
                                             -configs.index(c)))
        tuned = statistics.fmean(results[n][tune][chosen][0] for n in names)
        for n in names:
            got, today = results[n][report][chosen], results[n][report][("today", 1.0)]
            print(f"| {tune} → {report} | {chosen[0]} w={chosen[1]:g} (tuning fold mean {tuned:.4f}) | {n} | "
                  + " | ".join(f"{x:.4f}" for x in got) + f" | {today[0]:.4f} | {got[0] - today[0]:+.4f} |")

    print("\n## Indexing cost: seconds to analyse the whole corpus (characters per second)")
    print("\n| variant | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for variant in variants:
        print(f"| {variant} | " + " | ".join(f"{cost[n][variant][0]:.2f} s ({cost[n][variant][1]:,.0f}/s)"
                                            for n in names) + " |")


if __name__ == "__main__":
    main()
