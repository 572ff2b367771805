// Package daemontest assembles a daemon.App in the test process (Coder's
// coderdtest.New; docs/architecture.md, "Tests"): a real data dir, database
// and file replica, the App's HTTP handler on an httptest server, and the
// typed admin client. The process side — the built binary, versitygw, the
// litestream CLI, the pulumi test provider — is internal/proctest, which
// imports no server package, so storage's tests do not link the daemon.
//
// Ingest (ingest.go) is the signed-ingest harness on an InProcess: a
// recording client that signs with a fake clock shared by the daemon, the
// routes' bodies, direct SQL, and a secret scan when the test ends.
//
// The package imports daemon, so only external test packages (daemon_test,
// ingest_test, the end-to-end tests) can use it. Functions that take a
// testing.TB must be called from the test's own goroutine (they may call
// t.Fatalf).
package daemontest
