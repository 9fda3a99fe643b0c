"""kcl-mp: a KCL MultiLangDaemon in Python (README.md). The version is declared here only:
pyproject.toml reads it (``[tool.setuptools.dynamic]``) and ``kcl-mp --version`` prints it."""

__version__ = "0.1.0"
