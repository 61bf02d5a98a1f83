"""The Redis state model (schema version 1): task records, turns, messages, inbox, leases, activations."""
