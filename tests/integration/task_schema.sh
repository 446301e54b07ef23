#!/usr/bin/env bash
# The C task parser and schemas/task.schema.json agree on every case, and
# task keys match an independent Python computation.
set -euo pipefail
exec "${CNX_PYTHON:-/usr/bin/python3}" "$CNX_SOURCE/tests/py/task_schema_check.py"
