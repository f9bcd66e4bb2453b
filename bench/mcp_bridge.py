"""Per-call overhead of bailinghub-mcp over a direct agent API call.

    bailinghub-mcp login --hub http://127.0.0.1:8000 --client-app-id APP --workspace store-assistant
    .venv/bin/python bench/mcp_bridge.py [--calls 100] [--query "退款政策 七天"] [--config-dir DIR]

Against the hub the stored sign-in points at (`make run`, or any hub). Two series of the same
knowledge search, alternating call by call (so both see the same load), after 5 warm-up pairs:
- direct: `POST /agent-api/v1/workspaces/ROUTE/knowledge/search` from this process over one
  keep-alive HTTP connection (httpx, the bridge's own wire checks), with the stored access token;
- bridge: the MCP SDK's stdio client calling the `knowledge_search` tool of a `bailinghub-mcp serve`
  subprocess, which makes that same request.
Prints p50/p95 of each and of the paired difference (bridge − direct) in milliseconds. Figures, never
assertions. The hub's own search time is in both series; the difference is the bridge: JSON-RPC
over stdio, the SDK's dispatch, a worker-thread hop, and the bridge's formatting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio
from bailinghub_mcp.auth import HubSession
from bailinghub_mcp.credentials import TokenStore
from mcp import Client, StdioServerParameters


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure(config_dir: Path, calls: int = 100, query: str = "退款政策 七天") -> str:
    """Direct and bridged searches alternate, so both series see the same load on the hub."""
    session = HubSession(TokenStore(config_dir))
    path = f"/agent-api/v1/workspaces/{session.workspace}/knowledge/search"
    command = str(Path(sys.executable).parent / "bailinghub-mcp")
    env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(config_dir)}
    direct: list[float] = []
    bridge: list[float] = []

    def direct_call() -> float:
        started = time.perf_counter()
        body = session.call("POST", path, json_body={"query": query}, schema="bailing.agent-knowledge-search.v1").body
        elapsed = (time.perf_counter() - started) * 1000
        assert body and body["status"] == "ok", body
        return elapsed

    async def run() -> None:
        async with Client(StdioServerParameters(command=command, args=["serve"], env=env)) as client:
            for index in range(calls + 5):
                direct_ms = await anyio.to_thread.run_sync(direct_call)
                started = time.perf_counter()
                result = await client.call_tool("knowledge_search", {"query": query})
                bridge_ms = (time.perf_counter() - started) * 1000
                assert not result.is_error, result
                if index >= 5:
                    direct.append(direct_ms)
                    bridge.append(bridge_ms)

    try:
        anyio.run(run)
    finally:
        session.close()
    return report(direct, bridge)


def report(direct: list[float], bridge: list[float]) -> str:
    paired = [b - d for b, d in zip(bridge, direct, strict=True)]
    rows = [("direct API", direct), ("through the bridge", bridge), ("bridge - direct", paired)]
    lines = [f"{len(direct)} knowledge searches each, alternating, one at a time (ms):"]
    for name, values in rows:
        lines.append(f"  {name:<20} p50 {percentile(values, 0.5):7.1f}   p95 {percentile(values, 0.95):7.1f}   "
                     f"mean {statistics.fmean(values):7.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--query", default="退款政策 七天")
    parser.add_argument("--config-dir", type=Path, default=None, help="the signed-in bailinghub-mcp config dir")
    args = parser.parse_args()
    config_dir = args.config_dir or TokenStore().directory
    print(measure(config_dir, args.calls, args.query))


if __name__ == "__main__":
    main()
