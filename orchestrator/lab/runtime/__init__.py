"""Container runtimes. Docker is the one we have; the rest of the orchestrator talks only to its methods."""
