"""The test suite: a package, so test modules import their helpers by name
(``tests.helpers``, ``tests.docs._codeblocks``) and nothing edits ``sys.path``.

The repository root is on the import path through pytest's ``pythonpath`` setting
(pyproject.toml); the paths the tests share are in ``tests/conftest.py``.
"""
