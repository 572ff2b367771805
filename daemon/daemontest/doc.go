// Package daemontest starts the real components chalupa's tests drive (docs/architecture.md,
// "Tests"): the built chalupa binary as a
// process, a versitygw S3 server on 127.0.0.1, and the litestream CLI for
// restores. Nothing here is a mock.
//
// Tools come from <repo>/.tools/bin, installed by contrib/install-test-tools.sh.
// A missing tool skips the test, or fails it when CI=true.
//
// New (inprocess.go) assembles a daemon.App in the test process instead
// (Coder's coderdtest.New): a real data dir, database and file replica, the
// App's HTTP handler on an httptest server, and the typed admin client.
//
// The package imports daemon, so only external test packages (daemon_test,
// storage_test, the root e2e tests) can use it. Functions that take a testing.TB must be called from the test's
// own goroutine (they may call t.Fatalf); Daemon.Do is safe from any goroutine.
//
// Known pitfall: with AWS_CA_BUNDLE set, Litestream's S3 client cannot load its
// configuration. Every child process here starts from a clean environment
// (PATH and HOME plus what the test passes), so the variable never reaches it.
package daemontest
