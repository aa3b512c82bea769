"""The kernel's exports have one declaration (csrc/zen_exports.h): the C sources include it and native.py builds its
ctypes signatures from it. Checked without building the kernel (no compiler needed)."""

import ctypes

from zen_analysis.zen import native


def test_every_call_into_the_kernel_matches_its_one_declaration():
    """ctypes passes surplus arguments on without a word: each call site in native.py must give exactly as many as
    zen_exports.h declares (the ctypes signatures are built from that header, and the C sources include it)."""
    import ast
    from pathlib import Path

    decl = native.declarations()
    tree = ast.parse(Path(native.__file__).read_text())
    checked = set()
    for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        aliases = {}  # in this function: fn = lib.zen_a if ... else lib.zen_b
        for n in ast.walk(func):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.IfExp) and isinstance(n.targets[0], ast.Name):
                names = [getattr(x, "attr", "") for x in (n.value.body, n.value.orelse)]
                if all(name.startswith("zen_") for name in names):
                    aliases[n.targets[0].id] = names
        for c in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
            attr = getattr(c.func, "attr", "")
            names = [attr] if attr.startswith("zen_") else aliases.get(getattr(c.func, "id", ""), [])
            for name in names:
                assert name in decl, f"line {c.lineno}: {name} is not declared in zen_exports.h"
                assert not any(isinstance(a, ast.Starred) for a in c.args), f"line {c.lineno}: count the arguments"
                assert len(c.args) == len(decl[name][1]), (
                    f"line {c.lineno}: {name} takes {len(decl[name][1])} arguments"
                )
                checked.add(name)
    assert checked == set(decl), f"declared but never called: {set(decl) - checked}"
    restype, argtypes = decl["zen_place"]
    assert restype is ctypes.c_int64 and len(argtypes) == 17 and argtypes[4] is ctypes.c_int
