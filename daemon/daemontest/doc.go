// Package daemontest assembles a daemon.App in the test process (Coder's
// coderdtest.New; docs/architecture.md, "Tests"): a real data dir, database
// and file replica, the App's HTTP handler on an httptest server, and the
// typed admin client. The process side — the built binary, versitygw, the
// litestream CLI, the pulumi test provider — is internal/proctest, which
// imports no server package, so storage's tests do not link the daemon.
//
// The package imports daemon, so only external test packages (daemon_test,
// the end-to-end tests) can use it. Functions that take a testing.TB must be
// called from the test's own goroutine (they may call t.Fatalf).
package daemontest
