// Package wire is protocol v1's bodies: the JSON an agent sends to the
// signed ingest routes and the answers it reads back, with the bounds and
// name rules both sides share (docs/operations.md, "Signed ingest",
// "Heartbeats and deadlines", "Telemetry", "Lifecycle events and runs",
// "Logs").
//
// A leaf beside ingest/signer: it imports the standard library only, so the
// fleet agent (agent/, cmd/chalupa-agent) speaks the protocol without
// linking the server. The server packages (ingest, ingest/telemetry,
// ingest/logs) declare their names for these types as aliases and keep the
// validation that needs their own rules and errors; the JSON shapes are
// defined here once. Every time is RFC 3339 on the wire; every body is
// decoded strictly by the server (an unknown field is refused).
package wire
