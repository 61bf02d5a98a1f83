"""Where a task's turn runs: local processes, or Kubernetes Jobs created by the operator."""
