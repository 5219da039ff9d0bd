import io

from fake_pytorch import five_patch_stack, stack_from_commits
from ndvstack import status
from ndvstack.installed import installed_torch
from ndvstack.stack import DEFAULT_PATCHES, Stack


def test_status_lists_base_patches_files_and_torch(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches")
    out = io.StringIO()
    status.main(Stack(tmp_path / "patches"), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == (f"base: https://github.com/pytorch/pytorch @ {fake_pytorch.base} (v2.15.0; "
                        "wheel torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl)")
    assert lines[1:8] == [
        "patches: 5",
        "  1. 0001-autograd-Detach-marked-view-outputs.patch",
        "     [autograd] Detach marked view outputs",
        "       torch/csrc/autograd/custom_function.cpp",
        "  2. 0002-autograd-Document-marked-views.patch",
        "     [autograd] Document marked views",
        "       docs/source/notes/extending.rst",
    ]
    assert "lint: clean" in lines
    # The fake base is not the torch this venv has installed.
    assert lines[-1].startswith("installed torch: 2.15.0+cu132 at d0f2af8b66b2 (") and \
        lines[-1].endswith(f"NOT the base ({fake_pytorch.base[:12]})")


def test_the_project_venv_has_the_base_torch():
    torch = installed_torch()
    assert torch is not None and torch.git_version == Stack(DEFAULT_PATCHES).base.commit
    out = io.StringIO()
    status.main(Stack(DEFAULT_PATCHES), out)
    assert out.getvalue().splitlines()[-1].endswith(", the base")
