"""The stand-in's extension module: only what `offloadkit check --python` reads of it."""
version = "0.0.0-other"
plugin_abi_version = 0
