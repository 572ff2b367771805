// Package daemontest starts the real components chalupa's tests drive (DESIGN.md,
// "Real components, and how tests start them"): the built chalupa binary as a
// process, a versitygw S3 server on 127.0.0.1, and the litestream CLI for
// restores. Nothing here is a mock.
//
// Tools come from <repo>/.tools/bin, installed by contrib/install-test-tools.sh.
// A missing tool skips the test, or fails it when CI=true.
//
// The package imports nothing from chalupa except daemon/adminapi (which
// imports only storage), so the tests of daemon and ingest, and storage's
// external tests, can use it without an import cycle. Functions that take a testing.TB must be called from the test's
// own goroutine (they may call t.Fatalf); Daemon.Do is safe from any goroutine.
//
// Known pitfall: with AWS_CA_BUNDLE set, Litestream's S3 client cannot load its
// configuration. Every child process here starts from a clean environment
// (PATH and HOME plus what the test passes), so the variable never reaches it.
package daemontest
