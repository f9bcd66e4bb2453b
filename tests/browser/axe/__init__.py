"""axe-core (axe.min.js beside this file, MPL-2.0, its licence header kept) run on a page."""

from __future__ import annotations

from pathlib import Path

AXE = Path(__file__).resolve().parent / "axe.min.js"

# What each finding names: the rule, its impact and the first few elements, enough to find the markup.
AXE_RUN = """async (context) => {
  const result = await axe.run(context || document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({rule: v.id, impact: v.impact,
                                      nodes: v.nodes.slice(0, 5).map(n => n.target.join(" "))}));
}"""


def violations(page, *, impacts: tuple[str, ...] = ("serious", "critical"), context: str | None = None) -> list[dict]:
    """axe-core's findings of these impacts on the page (or inside the `context` selector)."""
    page.add_script_tag(path=str(AXE))
    return [v for v in page.evaluate(AXE_RUN, context) if v["impact"] in impacts]
