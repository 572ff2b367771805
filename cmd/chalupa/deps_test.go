package main

import (
	"testing"

	"github.com/chalupa-run/chalupa/internal/depstest"
)

const module = depstest.Module

// TestDeps: the light binary links no server package, so every command
// the operator types starts without them (docs/operations.md,
// "Footprint"); the server's commands forward to chalupad.
func TestDeps(t *testing.T) {
	depstest.Check(t, "the light binary", []string{module + "/cmd/chalupa"}, depstest.Forbidden(map[string]string{
		"github.com/prometheus/":  "metrics are the server's",
		"google.golang.org/grpc":  "gRPC comes with Pulumi",
		module + "/cli/servercmd": "the server's commands run in chalupad (forwarded)",
	}))
}
