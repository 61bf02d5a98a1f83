"""Running shell commands for ``run_command``: the result format (``result.py``), the local runner (a sandboxed or
plain subprocess, ``local_runner.py``) and the client of the workbench's exec server (``exec_client.py``)."""
