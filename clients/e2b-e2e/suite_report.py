"""pytest plugin for scripts/e2b-suite.sh: writes each test's outcome (passed, failed, skipped)
by node id to the JSON file named by $E2B_SUITE_REPORT, from the controlling process only (under
pytest-xdist the workers' reports reach the controller's hooks too). A test whose setup or
teardown errs counts as failed. Loaded from outside the suite (`-p suite_report`), which stays
unmodified.
"""

from __future__ import annotations

import json
import os
from typing import Dict

_outcomes: Dict[str, str] = {}


def pytest_runtest_logreport(report) -> None:  # type: ignore[no-untyped-def]
    nodeid = report.nodeid
    if report.failed:
        _outcomes[nodeid] = "failed"
    elif report.skipped:
        _outcomes.setdefault(nodeid, "skipped")
    elif report.when == "call" and _outcomes.get(nodeid) != "failed":
        _outcomes[nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus) -> None:  # type: ignore[no-untyped-def]
    if hasattr(session.config, "workerinput"):
        return
    path = os.environ.get("E2B_SUITE_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(_outcomes, f, indent=0, sort_keys=True)
