import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_pytorch import environment_for_git, fake_pytorch_tree  # noqa: E402


@pytest.fixture(autouse=True)
def git_identity(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    for key, value in environment_for_git(home).items():
        monkeypatch.setenv(key, value)
    return home


@pytest.fixture
def fake_pytorch(tmp_path):
    return fake_pytorch_tree(tmp_path / "pytorch")
