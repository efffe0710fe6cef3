"""The trace viewer in a real headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium): the page of each engine's committed trace (``docs/view/traces``,
written by ``coinfer demo``) loads, shows the counts the trace holds, and keeps the
model's text as text. Screenshots go to ``$COINFER_SCREENSHOTS`` (``docs/view`` keeps one
per engine) or the test's folder."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coinfer.decoding.trace import load_trace, origin_counts
from coinfer.serve.viewer import page, write_page

TRACES = Path(__file__).resolve().parents[2] / "docs" / "view" / "traces"
ENGINES = ["speculative", "collective", "llmcad", "minions", "dragon", "jupiter"]
HOSTILE = '</script><script>document.title="pwned"</script><img src=x onerror="document.title=1">'


def _chromium() -> tuple[str, str]:
    found = shutil.which("chromium"), shutil.which("chromedriver")
    if None in found:
        why = "needs Debian's chromium and chromium-driver (scripts/install-debian-packages.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    binary, driver = _chromium()
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,1000"):  # fmt: skip
        options.add_argument(flag)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    yield chrome
    chrome.quit()


def _open(browser: Any, trace: dict[str, Any], folder: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(write_page(trace, folder / "page.html").as_uri())
    WebDriverWait(browser, 15).until(
        lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1"
    )


def _shown(browser: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, css))


def _text(browser: Any, css: str) -> str:
    return str(_shown(browser, css)[0].get_attribute("textContent"))


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engines_trace_shows_its_counts(browser: Any, engine: str, tmp_path: Path) -> None:
    trace = load_trace(TRACES / f"{engine}.json")
    _open(browser, trace, tmp_path)
    legend = {e.get_attribute("data-origin"): int(e.find_element("css selector", ".count").text)
              for e in _shown(browser, "#legend .legend")}  # fmt: skip
    assert legend == {o: n for o, n in origin_counts(trace).items() if n}
    spans = "".join(piece for step in trace["steps"] for _, piece, _ in step["spans"])
    assert _text(browser, "#text") == spans and spans.strip()
    assert _text(browser, "#title") == f"{trace['engine']} · {trace['model']}"
    assert _text(browser, "[data-stat=n_tokens] td:last-child") == str(trace["stats"]["n_tokens"])
    _check_engine(browser, engine, trace)
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    folder = Path(os.environ.get("COINFER_SCREENSHOTS") or tmp_path)
    assert browser.save_screenshot(str(folder / f"{engine}.png"))


def _check_engine(browser: Any, engine: str, trace: dict[str, Any]) -> None:
    drafted = [s for s in trace["steps"] if s["drafted"] > 0]
    if engine in ("speculative", "collective", "llmcad"):
        assert drafted and _shown(browser, "#plot-draft")[0].get_attribute("data-bars") == str(len(drafted))
        assert len(_shown(browser, "#plot-accept rect")) == len(drafted)
    if engine == "minions":
        events = [s["event"] for s in trace["steps"] if "event" in s]
        rounds = sorted({e["round"] for e in events})
        assert [
            int(r.get_attribute("data-round")) for r in _shown(browser, "#minions-rounds tbody tr")
        ] == rounds
        jobs = sum(e["data"]["jobs"] for e in events if e["event"] == "jobs")
        cells = [c.text for c in _shown(browser, "#minions-rounds tbody tr td")]
        assert int(cells[1]) == jobs and cells[7] == f"${trace['cost']['remote_by_round']['1']:.5f}"
    if engine == "dragon":
        for side in ("device", "cloud"):
            assert int(_text(browser, f"#dragon-{side}-accepted")) == trace["extras"]["accepted"][side]
            assert int(_text(browser, f"#dragon-{side}-rejected")) == trace["extras"]["rejected"][side]
            assert len(_shown(browser, f"#dragon-{side} .cell")) == len(trace["steps"])
    if engine == "jupiter":
        points = [p.text for p in _shown(browser, "#outline-points li")]
        assert points == trace["extras"]["outline"] and points


def test_the_models_text_is_shown_never_run(browser: Any, tmp_path: Path) -> None:
    trace = load_trace(TRACES / "speculative.json")
    trace["steps"][0]["spans"] = [["target", HOSTILE, 1]]
    trace["model"] = HOSTILE
    _open(browser, trace, tmp_path)
    assert browser.title == "coinfer trace"
    assert _text(browser, "#text").startswith(HOSTILE) and HOSTILE in _text(browser, "#title")
    assert not _shown(browser, "#text img")


def test_the_page_carries_the_trace_as_data_only() -> None:
    trace = load_trace(TRACES / "speculative.json") | {"text": HOSTILE}
    html = page(trace)
    data = html.split('<script id="trace" type="application/json">')[1].split("</script>")[0]
    assert json.loads(data) == trace and HOSTILE not in html  # all of it inside, none of it markup
    assert html.count("<script") == 2  # the data and the viewer's own code
