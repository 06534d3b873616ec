"""The README's examples work as written.

Its ```python blocks run in order in one namespace (later blocks use names of the quickstart), in a
temporary directory, with the process-wide limits they change restored afterwards; a block that imports a
package that is not installed is skipped.  Its set-up, test and main-job commands are the ones ``.ci/run``
runs.
"""
import importlib.util
import pathlib
import re

import pytest

from fastpld import resources

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _missing_imports(code):
    names = re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", code, re.M)
    return [n for n in names if importlib.util.find_spec(n) is None]


def test_readme_has_python_examples():
    assert len(PYTHON_BLOCKS) >= 5
    assert "fastpld.compose(" in PYTHON_BLOCKS[0] and "PrivacyAccountant" in PYTHON_BLOCKS[0]


@pytest.mark.filterwarnings("ignore:Secure RNG turned off")  # opacus' PrivacyEngine(), as in its own tests
@pytest.mark.filterwarnings("ignore:Optimal order is the:UserWarning")  # opacus' PRV domain sizing
def test_readme_python_examples_run(tmp_path, monkeypatch):
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib

        matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)  # (the plot example saves a file)
    limits = resources._state["limit"], resources._state["results"], resources._slots.limit
    namespace, skipped = {}, []
    try:
        for i, code in enumerate(PYTHON_BLOCKS):
            missing = _missing_imports(code)
            if missing:
                skipped.append((i, missing))
                continue
            exec(compile(code, f"README.md python block {i}", "exec"), namespace)
    finally:
        resources.set_cache_limit(limits[0], results=limits[1])
        resources.set_thread_limit(limits[2])
        if importlib.util.find_spec("matplotlib") is not None:
            import matplotlib.pyplot as plt

            plt.close("all")
    assert all(i > 0 for i, _ in skipped), skipped  # the quickstart needs nothing but fastpld


def _commands(section_title):
    part = README.split(f"## {section_title}", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for block in re.findall(r"```bash\n(.*?)```", part, re.S) for line in block.splitlines()
            if line.strip()]


def test_readme_commands_are_the_ci_commands():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = _commands("Set-up, tests, main job")
    assert len(commands) == 3
    for cmd in commands:
        assert cmd in [line.strip() for line in ci], cmd
