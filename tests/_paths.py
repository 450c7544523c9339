"""Where things are, for tests in any subject folder below tests/: the repository root and the tests folder
(which holds the support modules, ``_*.py``, and the second environment's fixtures, ``envs/``)."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
