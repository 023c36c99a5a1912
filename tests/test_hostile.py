"""The hostile-input corpus (tests/hostile_corpus.py) through every input entry point: each case
exits 0 (with a warning where one is due) or 1 with one line naming the file, never 123, within
TIME_LIMIT seconds under ``ulimit -v`` (MEMORY_LIMIT), leaving no temporary file behind.

The representative subset (a few cases of every class) runs in every suite; the whole corpus
(over 600 cases) is marked slow."""
from __future__ import annotations

import sys

import pytest

from support import ROOT

sys.path.insert(0, str(ROOT / "tests"))
import hostile_corpus as hc  # noqa: E402  (a generator script, not a test module)


def _check(outcomes) -> None:
    bad = [f"{o.case.id}: {'; '.join(o.problems)} (exit {o.code}, {o.seconds:.1f}s) {o.stderr.strip()[-300:]}"
           for o in outcomes if o.problems]
    assert not bad, "\n".join(bad)


def test_corpus_covers_every_class_and_entry_point(tmp_path):
    cases = hc.generate(tmp_path / "corpus")
    assert len(cases) >= 300
    classes = {c.cls for c in cases}
    assert classes == {"special-files", "json-structure", "yaml-structure", "wrong-types", "semantics", "captures",
                       "snapshots", "hostlists", "nvidia-smi", "measurements", "outputs"}
    entry = {c.id.rsplit("@", 1)[1] for c in cases if "@" in c.id}
    assert set(hc.TOPO_COMMANDS) <= entry
    assert {"plan-hosts", "plan-cluster", "predict-compare", "rings-compare", "trees-compare", "probe", "snapshot",
            "doctor"} <= entry
    assert all(c.fast is False for c in cases if c.cls == "wrong-types" and "show-json" not in c.id)
    for cls in classes:  # the subset is representative: every class has a case in it
        assert any(c.fast for c in cases if c.cls == cls), cls


def test_representative_subset(tmp_path):
    cases = [c for c in hc.generate(tmp_path / "corpus", full=False) if c.fast]
    assert 20 <= len(cases) <= 40
    scratch = tmp_path / "run"
    scratch.mkdir()
    _check(hc.run_all(cases, scratch, jobs=2))


@pytest.mark.slow
def test_whole_corpus(tmp_path):
    cases = hc.generate(tmp_path / "corpus")
    scratch = tmp_path / "run"
    scratch.mkdir()
    _check(hc.run_all(cases, scratch, jobs=2))
