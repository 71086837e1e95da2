"""The protocol edge: the gRPC server, the compute pool, the runner, the wire."""
