"""Settings the runner tests need before CrewAI is imported: no telemetry, no tracing, no prompt.

CrewAI sends telemetry and trace spans unless told not to; tests reach loopback only. Imported
first by every module that imports crewai (tests, the kit's profile runs in-process).
"""

from __future__ import annotations

import os

RUNNER_ENVIRONMENT = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "OTEL_SDK_DISABLED": "true",
    "CREWAI_TRACING_ENABLED": "false",
}

for _name, _value in RUNNER_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)
