"""The trace viewer: one static HTML page per trace (``coinfer view``, ``/traces/<id>``).

The page carries the trace as JSON and draws it in the browser with no network: the
tokens coloured by where they came from, the stats, each round's draft length and
acceptance, MinionS rounds, DRAGON's verdicts per side, Jupiter's outline. The model's
text goes into the page as data and is shown with ``textContent``, never as markup.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError

__all__ = ["page", "write_page"]

TEMPLATE = Path(__file__).with_name("viewer.html")
SLOT = "/*TRACE*/"


@cache
def _template() -> str:
    return TEMPLATE.read_text(encoding="utf-8")


def page(trace: dict[str, Any]) -> str:
    """The viewer's HTML for ``trace``."""
    data = json.dumps(trace, ensure_ascii=False)
    # inside <script>: no "</script>", no "<!--"; the escapes are JSON's own
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _template().replace(SLOT, data, 1)


def write_page(trace: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    try:
        out.write_text(page(trace), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the page to {out}: {exc}", hint="pick a writable path") from exc
    return out
