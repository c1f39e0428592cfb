"""A stand-in offloadkit package of another version, for the test that `offloadkit check --python`
refuses an interpreter that imports it (python/bridge/tests/CMakeLists.txt,
python_check.interpreter_other_version)."""
