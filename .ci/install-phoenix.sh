#!/bin/sh
# Install Arize Phoenix (a local OpenTelemetry UI and OTLP/HTTP receiver) for
# tests/otel/test_phoenix.py, in a virtual environment of its own: its ~130 dependencies
# (pandas, grpcio, an LLM SDK or three) are Phoenix's, not piagent's, and must not pin the
# versions piagent is tested with. Idempotent: does nothing when it is installed already.
# The test finds it at $PIAGENT_PHOENIX (default: ~/.cache/piagent/phoenix/bin/phoenix).
set -eu
VERSION=20.26.1
VENV="${PIAGENT_PHOENIX_VENV:-$HOME/.cache/piagent/phoenix}"
if [ -x "$VENV/bin/phoenix" ] && "$VENV/bin/python" -c "import phoenix" 2>/dev/null; then
    exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "arize-phoenix==$VERSION"
"$VENV/bin/phoenix" --help >/dev/null
