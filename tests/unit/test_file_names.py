"""No module file name is used twice in the package: ``zen.py`` in three folders and ``push_pull.py`` in two read
alike in a traceback, an editor's tab and a grep, while they are different things. Each name says what its module
is."""

import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_file_name_is_reused_across_folders():
    folders = collections.defaultdict(list)
    for path in [*(ROOT / "zen_analysis").rglob("*.py"), *(ROOT / "zen_experiments").rglob("*.py")]:
        if path.name not in ("__init__.py", "__main__.py"):
            folders[path.name].append(str(path.parent.relative_to(ROOT)))
    reused = {name: sorted(where) for name, where in folders.items() if len(where) > 1}
    assert not reused, reused
