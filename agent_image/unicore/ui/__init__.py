"""The local-mode web UI (``unicore ui``): see ``unicore.ui.server``."""
