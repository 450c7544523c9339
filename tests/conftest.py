"""Shared test set-up: bfcl-eval writes under BFCL_PROJECT_ROOT, so point it at a temporary folder."""

import os
import tempfile

os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bfcl-root-"))
