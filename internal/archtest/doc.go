// Package archtest holds the tests that keep the repository's shape
// (docs/architecture.md): imports point down the layers of "Dependency
// direction" (imports_test.go), nothing outside the agent imports it but
// the binaries that carry its commands (agent_test.go), storage's tests
// link no Pulumi, both lanes of contrib/test.sh run every package
// (lanes_test.go), and no daemon handler file builds a worker nor any
// daemon function grows long (shape_test.go). It has no code of its own;
// the tests read the module with `go list`, the scripts with bash and the
// daemon's files with go/ast.
package archtest
