// Package protocol is chalupa's signed-ingest protocol v1 (docs/operations.md,
// "Signed ingest"), the one place agent and server share: the signing rules
// for both sides (the canonical string, the signature, header parsing, a
// Client that agents, chalupa's own tests and its load generator send signed
// requests with) and the bodies — the JSON an agent sends to the signed
// ingest routes and the answers it reads back, with the bounds and name
// rules both sides share ("Heartbeats and deadlines", "Telemetry",
// "Lifecycle events and runs", "Logs").
//
// Signature = hex(HMAC-SHA256(key, "v1\n" + timestamp + "\n" + nonce + "\n" +
// METHOD + "\n" + path + "\n" + hex(SHA256(body)))), sent as
// "X-Chalupa-Signature: v1=<hex>". The key is the raw key bytes: for a
// per-environment key, the 32 bytes its base64url material decodes to.
//
// A leaf: it imports the standard library (and internal leaves) only, so
// the fleet agent (agent/, cmd/chalupa-agent) speaks the protocol without
// linking the server. Each type has one name, this package's: the server
// packages (ingest, ingest/telemetry, ingest/logs) use these types directly
// and keep the validation that needs their own rules and errors. Every time
// is RFC 3339 on the wire; every body is decoded strictly by the server (an
// unknown field is refused).
package protocol
