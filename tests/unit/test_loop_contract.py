"""The training loop reaches its sync object only through the contract (``zen_analysis.sync.contract.TrainingSync``):
an AST data-flow over the loop's modules follows the sync wherever it goes, whatever the names it travels under."""

import ast
from pathlib import Path

LOOP = Path(__file__).resolve().parents[2] / "zen_analysis" / "train"
LOOP_MODULES = ("loop.py", "setup.py", "step_timer.py")
MECHANISMS = {"hooks_for", "slow_link"}
"""The callables outside the loop's modules that the loop hands its sync to: the mechanisms that wrap it (local SGD's
hooks, the slow link). Anything else the sync is handed to would be a way around the contract."""
SEEDS = ("GradSync", "TrainingSync")
"""Annotations that make a parameter the sync."""


class SyncFlow:
    """Every member reached from the sync object in parsed modules analysed together. The sync starts as any
    parameter annotated with one of :data:`SEEDS` and flows through assignments (``a = sync``, ``a = b or sync``,
    tuple unpacking), returns (``run, sync = setup_run(...)``), arguments of the modules' own functions and
    constructors, and attributes it is stored in (``self._sync = sync``, ``Run(sync=sync)``: then ``x._sync`` and
    ``x.sync`` anywhere). :meth:`run` gives (members used, lines probing it with getattr / hasattr, the outside
    callables it is handed to)."""

    def __init__(self, trees: list[ast.Module]) -> None:
        nodes = [n for t in trees for n in ast.walk(t)]
        self.funcs = {n.name: n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        for c in (n for n in nodes if isinstance(n, ast.ClassDef)):  # a constructor call: its __init__
            for f in c.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    self.funcs[c.name] = f
        self.tracked = {id(f): set() for f in self.funcs.values()}
        for f in self.funcs.values():
            for a in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]:
                if a.annotation is not None and any(w in ast.unparse(a.annotation) for w in SEEDS):
                    self.tracked[id(f)].add(a.arg)
        self.fields: set[str] = set()
        self.returns: dict[str, int | None] = {}  # function -> the sync's index in the tuple it returns (None: itself)

    @staticmethod
    def callee(call: ast.Call) -> str:
        return getattr(call.func, "id", None) or getattr(call.func, "attr", "")

    def is_sync(self, e: ast.AST, names: set[str]) -> bool:
        if isinstance(e, ast.Name):
            return e.id in names
        if isinstance(e, ast.Attribute):
            return e.attr in self.fields
        if isinstance(e, ast.BoolOp):
            return any(self.is_sync(v, names) for v in e.values)
        if isinstance(e, ast.IfExp):
            return self.is_sync(e.body, names) or self.is_sync(e.orelse, names)
        if isinstance(e, ast.NamedExpr):
            return self.is_sync(e.value, names)
        return isinstance(e, ast.Call) and self.returns.get(self.callee(e), -1) is None

    def bind(self, target: ast.AST, value: ast.AST, names: set[str]) -> bool:
        """Mark what ``target = value`` makes the sync; True if anything is new."""
        before = (len(names), len(self.fields))
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            for t, v in zip(target.elts, value.elts):
                self.bind(t, v, names)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call) and self.callee(value) in self.returns:
            i = self.returns[self.callee(value)]
            if i is not None and i < len(target.elts) and isinstance(target.elts[i], ast.Name):
                names.add(target.elts[i].id)
        elif self.is_sync(value, names) and isinstance(target, ast.Name):
            names.add(target.id)
        elif self.is_sync(value, names) and isinstance(target, ast.Attribute):
            self.fields.add(target.attr)
        return (len(names), len(self.fields)) != before

    def hand(self, call: ast.Call, names: set[str]) -> bool:
        """Follow the sync into a call's arguments; True if anything is new (what escapes goes to ``escapes``)."""
        target, changed = self.funcs.get(self.callee(call)), False
        params = [a.arg for a in target.args.args] if target else []
        params = params[1:] if params[:1] == ["self"] else params
        for i, arg in enumerate(call.args):
            if not self.is_sync(arg, names):
                continue
            if target is None:
                self.escapes.add(self.callee(call))
            elif i < len(params) and params[i] not in self.tracked[id(target)]:
                self.tracked[id(target)].add(params[i])
                changed = True
        for kw in call.keywords:
            if not (kw.arg and self.is_sync(kw.value, names)):
                continue
            known = self.tracked[id(target)] if target is not None else self.fields  # else a field of what it builds
            changed |= kw.arg not in known
            known.add(kw.arg)
        return changed

    def visit(self, f: ast.FunctionDef) -> bool:
        """One pass over a function; True if it marked anything new."""
        names, changed = self.tracked[id(f)], False
        for n in ast.walk(f):
            if isinstance(n, ast.Assign):
                changed |= any(self.bind(t, n.value, names) for t in n.targets)
            elif isinstance(n, ast.AnnAssign | ast.NamedExpr) and n.value is not None:
                changed |= self.bind(n.target, n.value, names)
            elif isinstance(n, ast.Return) and n.value is not None and f.name not in self.returns:
                elts = n.value.elts if isinstance(n.value, ast.Tuple) else None
                hit = [i for i, e in enumerate(elts or []) if self.is_sync(e, names)]
                if hit or (elts is None and self.is_sync(n.value, names)):
                    self.returns[f.name], changed = (hit[0] if hit else None), True
            elif isinstance(n, ast.Attribute) and self.is_sync(n.value, names):
                self.used.add(n.attr)
            elif isinstance(n, ast.Call) and self.callee(n) in ("getattr", "hasattr"):
                self.probes += [n.lineno] if n.args and self.is_sync(n.args[0], names) else []
            elif isinstance(n, ast.Call):
                changed |= self.hand(n, names)
        return changed

    def run(self) -> tuple[set[str], list[int], set[str]]:
        changed = True
        while changed:  # to a fixed point: a pass may find the sync where an earlier one did not look
            self.used, self.probes, self.escapes = set(), [], set()
            changed = any([self.visit(f) for f in {id(f): f for f in self.funcs.values()}.values()])
        return self.used, self.probes, self.escapes


def sync_flow(trees: list[ast.Module]) -> tuple[set[str], list[int], set[str]]:
    return SyncFlow(trees).run()


def test_the_loop_calls_only_what_the_sync_contract_declares():
    """The loop (train/loop.py, its setup and its step timer) reaches its sync object only through the contract's
    members (``TrainingSync``, at most eight), with no getattr / hasattr probing, and hands it to no callable but
    the mechanisms that wrap it."""
    from zen_analysis.sync.contract import TrainingSync

    declared = {n for n in vars(TrainingSync) if not n.startswith("_")}
    assert len(declared) <= 8, f"the sync contract declares {len(declared)} members: {sorted(declared)}"
    used, probes, escapes = sync_flow([ast.parse((LOOP / m).read_text()) for m in LOOP_MODULES])
    assert not probes, f"the loop probes the sync object at lines {probes}"
    assert used, "the loop never touches its sync: the check would pass on anything"
    assert used <= declared, f"the loop uses undeclared sync members {sorted(used - declared)}"
    assert escapes <= MECHANISMS, f"the loop hands its sync to {sorted(escapes - MECHANISMS)} (not a mechanism)"


def test_the_flow_follows_the_sync_through_renames_returns_calls_and_fields():
    planted = ast.parse(
        "def setup(sync: GradSync):\n"
        "    return 1, sync or build()\n"
        "def loop():\n"
        "    run, s = setup(None)\n"
        "    pseudo = s\n"
        "    getattr(pseudo, 'seconds', 0.0)\n"
        "    helper(pseudo)\n"
        "    box = Run(keep=pseudo)\n"
        "    box.keep.sync_seconds\n"
        "    Timer(s)\n"
        "    other(s)\n"
        "def helper(x):\n"
        "    x.pseudo_capture\n"
        "class Timer:\n"
        "    def __init__(self, sync):\n"
        "        self._held = sync\n"
        "    def read(self):\n"
        "        return self._held.overlap_seconds\n"
    )
    assert sync_flow([planted]) == ({"pseudo_capture", "sync_seconds", "overlap_seconds"}, [6], {"other"})
