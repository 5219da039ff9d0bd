import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_pytorch import environment_for_git, fake_pytorch_tree  # noqa: E402
from fake_stack import double_stack  # noqa: E402
from ndvstack.wheel import wheelhouse  # noqa: E402

# Every test gets a HOME of its own (git_identity): the machine's wheelhouse (torch and its
# dependencies, 2.8 GB, see scripts/_venv.sh) is fixed here, before that, so that the venvs and
# wheels the tests make read it instead of downloading it again.
os.environ["NDV_WHEELHOUSE"] = str(wheelhouse())

# A run started in the background by a non-interactive shell (as a CI runner may) ignores SIGINT,
# and so would every process the tests start. Python's own handler here means the children
# start with the default action again, and the Ctrl-C tests' signal reaches them as a terminal's.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def git_identity(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    for key, value in environment_for_git(home).items():
        monkeypatch.setenv(key, value)
    yield home
    shutil.rmtree(home, ignore_errors=True)  # per test, like tmp_path: caches in it can be large


@pytest.fixture
def fake_pytorch(tmp_path):
    return fake_pytorch_tree(tmp_path / "pytorch")


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    """The test-double stack, once per module: (stack, overlay source, partial tree, folder)."""
    tmp = tmp_path_factory.mktemp("double")
    with pytest.MonkeyPatch.context() as mp:  # the autouse identity is per test; this is per module
        for key, value in environment_for_git(tmp).items():
            mp.setenv(key, value)
        stack, src, tree = double_stack(tmp)
    return stack, src, tree, tmp
