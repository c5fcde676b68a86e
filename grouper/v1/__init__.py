"""Generated gRPC code (``make setup`` runs protoc on proto/grouper/v1/*.proto)."""
