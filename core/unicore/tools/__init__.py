"""Tools the model can call; see ``registry`` for the built-ins and their JSON schemas."""
