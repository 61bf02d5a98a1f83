"""The ``kubectl agenttask`` plugin (console script ``kubectl-agenttask``). See docs/kubectl.md."""
