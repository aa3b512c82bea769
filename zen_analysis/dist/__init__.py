"""Process groups, the rank entry point and the launcher (fork on CPU, torchrun on GPUs / several machines)."""
