"""The sidecar's gRPC transport: the server, its handlers, the service's RPCs, the Session
protocol, authentication and the listening policy. The only part of the sidecar that touches
protobuf messages."""
