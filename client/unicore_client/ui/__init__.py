"""The local-mode web UI (``unicore ui``): see ``unicore_client.ui.server``."""
