"""Which script files the web UI reads (docs/ui.md, "Scripts"): a browser-facing form must not name server paths.

The CLI's ``scripted:PATH`` reads any file its user names; the UI's create form and its manifests come from a browser,
so there ``scripted:NAME`` names a file directly in the directory given with ``unicore ui --scripts DIR`` (a plain
file name: no ``/``, not starting with ``.``; its real path, links followed, in DIR), and without ``--scripts`` no
script file at all. Every spelling the model registry accepts is checked (``Scripted:``, `` scripted :``), the script
is read once here and stored with the task (the turn processes never read a path), and a refusal names only what the
user typed, nothing of any file. A script in DIR with a mistake is shown as the CLI shows it (it is the user's own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unicore.errors import ConfigError
from unicore.providers.registry import parse_model_spec

from unicore_client.arguments import UsageError, read_script_file


class ScriptRefused(ValueError):
    """A model or script the UI does not read (400; one line naming nothing of any file)."""


def ui_model(model: str, scripts: Path | None, inline: dict[str, Any] | None = None
             ) -> tuple[str, dict[str, Any] | None]:
    """(model spec to store, script to store) for a model named in the UI, with ``inline`` the manifest's own
    ``spec.script``; a ``scripted:NAME`` model is read from ``scripts`` only."""
    try:
        parsed = parse_model_spec(model)
    except ConfigError as exc:
        raise ScriptRefused(str(exc)) from None
    if parsed.provider != "scripted" or not parsed.name:
        return model, inline
    if inline is not None:
        raise ScriptRefused("spec.script goes with model 'scripted', not with a script file (scripted:NAME)")
    return "scripted", _read(parsed.name, scripts)


def _read(name: str, scripts: Path | None) -> dict[str, Any]:
    from unicore.providers.scripted import load_script

    if scripts is None:
        raise ScriptRefused("the web UI reads no script file (scripted:NAME) unless it was started with "
                            "'unicore ui --scripts DIR'; use model 'scripted' with spec.script (New task from YAML)")
    shown = repr(name) if len(name) <= 80 else f"{name[:60]!r}..."
    if Path(name).name != name or "\\" in name or name.startswith("."):
        raise ScriptRefused(f"scripted:NAME names a file in the --scripts directory, not a path: {shown}")
    directory = scripts.resolve()
    path = (directory / name).resolve()
    if path.parent != directory or not path.is_file():
        raise ScriptRefused(f"no script {shown} in the --scripts directory")
    try:
        return load_script(read_script_file(str(path))).model_dump(exclude_none=True)
    except (ConfigError, UsageError) as exc:  # the directory's own script: its mistake is the user's to see
        raise ScriptRefused(f"{exc} (script {shown} of the --scripts directory)") from None


__all__ = ["ScriptRefused", "ui_model"]
