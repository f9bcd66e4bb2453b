"""Reading checks shared by the browser tests: how well an element's text stands out."""

from __future__ import annotations

# The WCAG contrast ratio of an element's text colour (or an SVG shape's `fill` or `stroke`) against the
# first opaque background behind it (itself or an ancestor; the page's canvas is white when none is set).
_CONTRAST = """(element, property) => {
  const rgb = value => (value.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) => {
    const linear = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  };
  let back = [255, 255, 255];
  for (let e = element; e; e = e.parentElement) {
    const color = rgb(getComputedStyle(e).backgroundColor);
    if (color.length === 3 || color[3] === 1) { back = color.slice(0, 3); break; }
  }
  const [light, dark] = [luminance(rgb(getComputedStyle(element)[property])), luminance(back)].sort((a, b) => b - a);
  return (light + 0.05) / (dark + 0.05);
}"""


def contrast_ratio(locator, *, colour: str = "color") -> float:
    """The contrast ratio (1 to 21) of the element at `locator` — its text, or the SVG `colour` given
    ("fill", "stroke") — against its background."""
    return locator.evaluate(_CONTRAST, colour)
