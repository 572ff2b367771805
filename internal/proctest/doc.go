// Package proctest starts the real components chalupa's tests drive as
// processes (docs/architecture.md, "Tests"): the built chalupa binary, a
// versitygw S3 server on 127.0.0.1, a mailpit SMTP server (STARTTLS or TLS,
// with authentication), the litestream CLI for restores and the pulumi CLI
// with the test provider. Nothing here is a mock.
//
// It imports no chalupa server package (only leaves: adminapi, datadir,
// randtoken), so any package's tests — storage's among them — can use it
// without linking the daemon or Pulumi. The in-process harness, which
// assembles a daemon.App, is daemon/daemontest.
//
// Tools come from <repo>/.tools/bin, installed by contrib/install-test-tools.sh.
// A missing tool skips the test, or fails it when CI=true.
//
// Under -short (FastLaneFlag, which contrib/test.sh --fast passes) the
// helpers that build the binary or run pulumi, Chromium or litestream
// restore skip their test (FullRunOnly): the fast lane leaves out exactly
// that work, and the full run, which never passes -short, runs all of it.
//
// Functions that take a testing.TB must be called from the test's own
// goroutine (they may call t.Fatalf); Daemon.Do is safe from any goroutine.
//
// Known pitfall: with AWS_CA_BUNDLE set, Litestream's S3 client cannot load its
// configuration. Every child process here starts from a clean environment
// (PATH and HOME plus what the test passes), so the variable never reaches it.
package proctest
