"""Make the repo importable as ``ansible_collections.llmops.serving``
(tests/collection_path.py) and name the paths the tests use."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from collection_path import ROOT  # noqa: E402,F401  pylint: disable=wrong-import-position

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
