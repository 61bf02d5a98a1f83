"""Where ``unicore_client.local.main`` looks for the Kubernetes spawner (UNICORE_SPAWNER=kubernetes)."""

from unicore.launch.k8s_spawner import KubernetesSpawner

__all__ = ["KubernetesSpawner"]
