"""idemlake's Python side: the ``idemlake`` binary this wheel installs, and a function that runs
it and returns its JSON reports.

The orchestrator integrations are submodules, imported only where their orchestrator is
installed: ``idemlake.airflow`` (an operator) and ``idemlake.dagster`` (partitioned assets with
asset checks). Both call :func:`run` and decide retries by the reports' ``retryable``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field

__all__ = ["FINAL_EXIT_CODES", "Result", "binary", "run"]

# Exit codes that no retry can fix, for when there is no report to read (the process was
# killed before it printed one). See the exit-codes reference.
FINAL_EXIT_CODES = {
    2: "invalid input (task file, SQL, lint, window or schema change)",
    3: "reconciliation mismatch between source and output",
    4: "audit or verify found damaged or differing windows",
    6: "a data check ([checks]) failed",
}


def binary() -> str:
    """The idemlake binary: ``IDEMLAKE_BIN``, else the one this wheel installed beside the
    interpreter, else ``idemlake`` on PATH."""
    explicit = os.environ.get("IDEMLAKE_BIN")
    if explicit:
        return explicit
    for scripts in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(scripts or "", "idemlake")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("idemlake") or "idemlake"


@dataclass
class Result:
    """One idemlake command: its exit code, its JSON reports (one per window), its stderr."""

    command: list[str]
    code: int
    reports: list[dict] = field(default_factory=list)
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def failed_reports(self) -> list[dict]:
        """The reports of what failed: windows not ``ok`` (or ``warned``, ``skipped``), and the
        one-line error of a command that failed as a whole."""
        return [
            r
            for r in self.reports
            if r.get("error") or r.get("status") not in ("ok", "warned", "skipped", "restored")
        ]

    @property
    def retryable(self) -> bool:
        """Whether re-running the same command unchanged may fix it and is safe: a report of
        what failed says ``retryable: true``; without one (the process was killed, say after
        some windows of a backfill were published), the exit code is not one of the final
        ones."""
        if self.code == 0:
            return False
        failed = self.failed_reports
        if failed:
            return any(r.get("retryable") is True for r in failed)
        return self.code not in FINAL_EXIT_CODES

    def reason(self) -> str:
        """What failed, in one line: the reports' errors, else the end of stderr."""
        errors = "; ".join(str(r["error"]) for r in self.reports if r.get("error"))
        why = FINAL_EXIT_CODES.get(self.code, "")
        text = errors or self.stderr.strip()[-2000:]
        return f"idemlake exited {self.code}{': ' + why if why else ''}: {text[:2000]}"


def run(
    args: list[str],
    *,
    project: str | None = None,
    lake: str | None = None,
    lineage_parent: str | None = None,
    env: dict[str, str] | None = None,
    log=None,
) -> Result:
    """Run ``idemlake --output json <args>`` and read its reports.

    ``project`` and ``lake`` default to ``IDEMLAKE_PROJECT`` / ``IDEMLAKE_LAKE`` (idemlake reads
    them itself); ``lineage_parent`` is ``NAMESPACE/JOB/RUN_ID`` of the orchestrator's
    OpenLineage run. ``log`` (a logger) receives idemlake's stderr line by line.
    """
    command = [binary()]
    if project:
        command += ["--project", project]
    if lake:
        command += ["--lake", lake]
    if lineage_parent:
        command += ["--lineage-parent", lineage_parent]
    command += ["--output", "json", *args]
    if log is not None:
        log.info("running: %s", " ".join(command))
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if log is not None:
        for line in proc.stderr.splitlines():
            log.info("idemlake: %s", line)
    reports = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                reports.append(json.loads(line))
            except ValueError:
                pass
    return Result(command, proc.returncode, reports, proc.stderr)
