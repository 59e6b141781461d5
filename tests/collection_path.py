"""Make the repo importable as ``ansible_collections.llmops.serving``.

The repository root is the collection root; ``make stage`` links it under
``.cache/collections/ansible_collections/llmops/serving``. Importing this
module (the conftests of tests/unit and tests/integration do) does the same
when pytest is run directly, and puts ``.cache/collections`` on sys.path.
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "llmops", "serving")

if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
