// Package adminapi is the contract of chalupa's admin API: the table of
// operations (by the operationIds the product names them by), the request
// and response types each carries, and a typed client whose methods are named
// after the operations. The daemon routes and registers its handlers from the
// same table, `chalupa admin api --list` prints it, and the accounting tests
// walk it, so the CLI and the server cannot drift apart (Tailscale's
// client/local and its LocalAPI are the model).
//
// The package is a leaf: it imports only the standard library, so the CLI,
// tests and future agents can use it without pulling in SQLite, Litestream or
// AWS (TestDeps enforces this).
//
// Every admin operation takes `Authorization: Bearer <CHALUPA_ADMIN_TOKEN>`,
// never a cookie, and answers errors as {"error":{"code","message"}}
// (docs/operations.md, "Admin API").
//
// One file per domain: status.go, environments.go, ingest_keys.go,
// fleet.go. Each declares its operation ids, its part of the table, its wire
// types and its client methods.
package adminapi
