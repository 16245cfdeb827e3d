"""The README's picture of the ledger's tallies (current with the caches), the costs page's table, and the README
itself: short, its picture the one the package draws, every link resolving."""

from __future__ import annotations

import gzip
import json
import re
import urllib.parse

import yaml

import gmp.overview as overview
from gmp import costs
from conftest import ROOT
from gmp.results.claims import NOT_RUN, PARTLY, REPRODUCED, VERIFIED

README = ROOT / "README.md"
MAX_README_LINES = 150


def test_the_readme_picture_draws_the_tallies_of_the_committed_caches():
    picture = ROOT / overview.PICTURE
    assert picture.is_file(), f"{overview.PICTURE} is missing: run python -m gmp.overview"
    counts = overview.tallies()
    assert overview.drawn(picture) == counts, (
        f"{overview.PICTURE} no longer matches the caches: run python -m gmp.overview and commit the picture")
    assert set(counts) == {"Chen & Ge", "Lu et al.", "SBSNN"}
    assert all(set(c) == set(overview.ORDER) for c in counts.values())


def test_the_tallies_count_only_the_papers_claims_provisional_ones_with_their_verdict(monkeypatch):
    rows = [{"source": "paper", "paper": "lu", "category": REPRODUCED},
            {"source": "paper", "paper": "lu", "category": f"{PARTLY} (provisional)"},
            {"source": "check", "paper": "lu", "category": REPRODUCED},
            {"source": "superseded", "paper": "sbsnn", "category": REPRODUCED},
            {"source": "paper", "paper": "chen", "category": NOT_RUN}]
    monkeypatch.setattr("gmp.results.verdicts.ledger_rows", lambda: rows)
    counts = overview.tallies()
    assert list(counts) == ["Lu et al.", "Chen & Ge"]
    assert {c: n for c, n in counts["Lu et al."].items() if n} == {REPRODUCED: 1, PARTLY: 1}
    assert {c: n for c, n in counts["Chen & Ge"].items() if n} == {NOT_RUN: 1}


def test_check_tells_a_picture_that_no_longer_matches_the_caches(tmp_path, monkeypatch, capsys):
    counts = {"Chen & Ge": dict.fromkeys(overview.ORDER, 0), "SBSNN": dict.fromkeys(overview.ORDER, 0)}
    counts["Chen & Ge"][REPRODUCED], counts["SBSNN"][VERIFIED] = 3, 2
    monkeypatch.setattr(overview, "tallies", lambda: counts)
    picture = tmp_path / "tallies.png"
    assert overview.main(["--check", str(picture)]) == 1
    assert "is missing" in capsys.readouterr().err
    assert overview.main([str(picture)]) == 0
    assert overview.drawn(picture) == counts
    assert overview.main(["--check", str(picture)]) == 0
    counts["SBSNN"][VERIFIED] = 1  # the caches moved on, the picture did not
    assert overview.main(["--check", str(picture)]) == 1
    assert "no longer matches the caches" in capsys.readouterr().err


def _cache(root, chapter, provenance, units=None):
    folder = root / chapter / "paper"
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text(json.dumps(provenance))
    if units is not None:
        with gzip.open(folder / "units.jsonl.gz", "wt") as out:
            out.writelines(json.dumps(u) + "\n" for u in units)


def test_costs_read_each_cache_its_units_their_seconds_and_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_RESULTS", str(tmp_path))
    _cache(tmp_path, "sbsnn_fitting", {"date": "2026-11-28 10:00 UTC", "device": "cpu (x)", "wall_time_s": 15.5},
           [{"key": "a", "value": 1, "seconds": 60.0, "device": "cuda (NVIDIA H200)"},
            {"key": "b", "value": 1, "seconds": 40.0, "device": "cuda (NVIDIA H200)"},
            {"key": "c", "value": 1, "seconds": 900.0}])
    _cache(tmp_path, "chen_uci", {"date": "2026-11-27 21:17 UTC", "device": "cpu (x)", "wall_time_s": 10.1},
           [{"key": "a", "value": 1}])
    _cache(tmp_path, "lu_gpn", {"date": "2026-11-26 09:00 UTC", "device": "cpu (x)", "wall_time_s": 140.5})
    rows = {r["chapter"]: r for r in costs.costs(["sbsnn_fitting", "chen_uci", "lu_gpn", "chen_vgg"])}
    assert rows["sbsnn_fitting"]["units"] == 3 and rows["sbsnn_fitting"]["unit_s"] == 1000.0
    assert rows["sbsnn_fitting"]["devices"] == {"cuda": 2, "cpu": 1}
    assert rows["chen_uci"]["unit_s"] == 0.0 and rows["lu_gpn"]["units"] == 0
    assert rows["chen_vgg"]["date"] is None and rows["chen_vgg"]["gpu_hours_estimate"] > 0
    table = costs.costs_table(["sbsnn_fitting", "chen_uci", "lu_gpn", "chen_vgg"])
    assert table.loc["sbsnn_fitting", "Units"] == "3 (1 on cpu, 2 on cuda)"
    assert table.loc["sbsnn_fitting", "Time the units record"] == "16.7 min"
    assert table.loc["chen_uci", "Time the units record"].startswith("not recorded")
    assert table.loc["lu_gpn", "Units"].startswith("none")
    assert table.loc["chen_vgg", "Paper-scale run"] == "not yet run"
    assert "GPU-hours" in table.loc["chen_vgg", "Time the units record"]


# The README: the front door.

def _readme_links() -> list[str]:
    text = README.read_text()
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(https?://[^>]+)>", text)


def test_the_readme_is_short_and_shows_the_picture_the_package_draws():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines, at most {MAX_README_LINES}"
    assert f"]({overview.PICTURE.as_posix()})" in README.read_text()
    assert "python -m gmp.overview" in README.read_text()


def test_every_link_of_the_readme_resolves():
    """A relative link names a file of the repository; a link to the published book or to Colab names the
    repository of ``_config.yml`` and a file of the repository (the book's page, the chapter's notebook)."""
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    owner, repo = url.removeprefix("https://github.com/").split("/")
    pages = f"https://{owner}.github.io/{repo}/"
    colab = f"https://colab.research.google.com/github/{owner}/{repo}/blob/main/"
    links = _readme_links()
    assert len(links) >= 8
    problems = []
    for link in links:
        if link.startswith(colab):
            target = link.removeprefix(colab)
        elif link.startswith(pages):
            page = link.removeprefix(pages)
            target = "book/intro.md" if page == "" else re.sub(r"\.html$", ".md", page)
        elif re.match(r"[a-z]+:", link):
            problems.append(f"{link}: not a link into this repository, its published book or Colab")
            continue
        else:
            target = urllib.parse.unquote(link.split("#")[0])
        if not (ROOT / target).is_file():
            problems.append(f"{link}: no file {target} in the repository")
    assert not problems, "\n".join(problems)


def test_the_readmes_three_lines_of_gmp_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1 and len(blocks[0].strip().splitlines()) == 3
    names: dict = {}
    exec(blocks[0], names)
    assert type(names["layer"]).__name__ == "GmPLinear"
    torch = names["torch"]
    assert names["model"](torch.randn(3, 10)).shape == (3, 100)


def test_the_readmes_lease_numbers_are_the_kept_leases():
    """The README's sentence on Table 2's GPU lease quotes the last kept lease's measurement as
    gmp.experiments.lu_real.lease_measurements reads it, rounded as printed."""
    from gmp.experiments.lu_real import lease_measurements

    text = " ".join((ROOT / "README.md").read_text().split())
    last = lease_measurements()[-1]
    probes = {p["networks"]: p for p in last["probes"]}
    floor, twelve = last["floor_ms_per_network_step"], probes[12]
    found = re.search(r"floor of ([\d.]+) ms per network on an H200; the lease of (\S+) measured ([\d.]+) ms per step "
                      r"for 12 networks \(([\d.]+) times their floor\), ([\d.]+) min for", text)
    assert found, "the README's lease sentence changed: update this test with it"
    assert found.groups() == (f"{floor:.2f}", last["date"][:10], f"{twelve['ms_per_step']:.1f}",
                              f"{twelve['ms_per_step'] / (12 * floor):.1f}", f"{twelve['group_minutes']:.1f}")
    assert f"({last['fits']} by the last lease's)" in text


def test_a_kept_lease_gives_each_timed_stacks_kernels_and_its_time_per_kernel(tmp_path):
    """lu_real's chapter computes the launches' share of the step from the lease's record: kernels per step and the
    microseconds a kernel took in a replayed graph, as the measurement wrote them."""
    import json

    from gmp.experiments.lu_real import lease_measurements

    summary = {"environment": {"date": "2026-12-01 10:00:00 UTC", "gpu": "G"},
               "lu_real": {"probes": [{"networks": 12, "seconds_per_step": 0.01, "group_minutes": 8.0}]}}
    measure = {"depth": 200, "width": 500, "batch": 64, "kernel_us": 1.25,
               "steps": [{"networks": 12, "mode": "CUDA graph, stacked kernels", "ms_per_step": 10.0,
                          "kernels_per_step": 1300}]}
    (tmp_path / "20261201-100000-summary.json").write_text(json.dumps(summary))
    (tmp_path / "20261201-100000-measure.json").write_text(json.dumps(measure))
    (lease,) = lease_measurements(tmp_path)
    assert lease["kernel_us"] == 1.25
    assert lease["steps"] == [{"networks": 12, "mode": "CUDA graph, stacked kernels", "ms_per_step": 10.0,
                               "kernels_per_step": 1300, "kernels_per_layer_step": 6.5}]
    (tmp_path / "20261201-100000-measure.json").unlink()
    assert lease_measurements(tmp_path)[0]["kernel_us"] is None and lease_measurements(tmp_path)[0]["steps"] == []
