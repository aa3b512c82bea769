"""Which rank failed and why: a run's failure named by its root cause (a fatal signal, then a real error, then an
abort, then a timeout), with that rank's traceback or the end of its log. :mod:`zen_analysis.ranks.procs`
watches the processes and raises what :func:`blame` returns."""

from __future__ import annotations

import signal
from pathlib import Path

from zen_analysis.ranks.entry import is_timeout


class RankFailedError(RuntimeError):
    """A rank raised, crashed or timed out; the message names it and shows its traceback."""

    def __init__(self, message: str, *, rank: int | None, run_id: str, pids: list[int]) -> None:
        super().__init__(message)
        self.rank = rank
        self.run_id = run_id
        self.pids = pids


def log_tail(path: Path, num_lines: int = 40) -> str:
    """The last ``num_lines`` lines of a log ("(no output)" if there is none)."""
    if not path.exists():
        return "(no output)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-num_lines:])


_FATAL_SIGNALS = {int(s) for s in (signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)}


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def blame(
    run_dir: Path, run_id: str, failed: list[int], codes: dict[int, int | None], killed: list[int], pids: list[int]
) -> RankFailedError:
    """The error to raise for a run whose ranks ``failed`` (their exit ``codes``; ``killed``: stopped while still
    running), naming the root cause from ``run_dir``'s ``errors/rank<r>.txt`` and ``logs/rank<r>.log``."""
    errors = {r: run_dir / "errors" / f"rank{r}.txt" for r in failed}
    with_tb = [r for r in failed if errors[r].exists()]
    # The root cause, in this order: a rank killed from outside or by a fatal fault (SIGKILL: the OOM killer or
    # kill -9; SIGSEGV, SIGBUS...: the others then fail on its closed connections); the first rank that raised
    # something other than a timeout; a rank that died by another signal (gloo aborts a rank whose peer died
    # with SIGABRT: a consequence more often than a cause); the first timeout.
    signalled = [r for r in failed if (codes.get(r) or 0) < 0]
    fatal = [r for r in signalled if -codes[r] in _FATAL_SIGNALS]
    raised = sorted(with_tb, key=lambda r: (is_timeout(errors[r].read_text()), errors[r].stat().st_mtime))
    if fatal:
        rank = fatal[0]
    elif raised and not is_timeout(errors[raised[0]].read_text()):
        rank = raised[0]
    else:
        rank = next(iter(signalled + raised + failed), None)
    if rank is None:
        return RankFailedError(
            f"run {run_id}: launcher failed without a rank error", rank=None, run_id=run_id, pids=pids
        )
    log = run_dir / "logs" / f"rank{rank}.log"
    code = codes.get(rank)
    if rank in signalled:
        name = _signal_name(-code)
        why = " (out of memory, or killed from outside)" if name == "SIGKILL" else ""
        msg = f"rank {rank} of run {run_id} was killed by {name}{why}; the end of its log:\n\n{log_tail(log).rstrip()}"
    else:
        body = errors[rank].read_text() if errors[rank].exists() else log_tail(log)
        if code is None:  # torchrun: per-rank exit codes stay inside torchrun, the error file says what happened
            how = "raised"
        else:
            how = f"exit code {code}"
        msg = f"rank {rank} of run {run_id} failed ({how}):\n\n{body.rstrip()}"
    msg += f"\n\nfull log: {log}"
    others = sorted(set(failed) - {rank})
    if others:
        msg += f"\nranks {others} failed {'after it' if rank in fatal else 'too'} (see errors/ in {run_dir})"
    if killed:
        msg += f"\nranks {killed} were still running and were stopped"
        if rank not in signalled and is_timeout(errors[rank].read_text() if errors[rank].exists() else ""):
            msg += f": a rank that never reached the collective (probably one of {killed}) is the hung one"
    return RankFailedError(msg, rank=rank, run_id=run_id, pids=pids)
