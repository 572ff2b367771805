//go:build tools

// Package tools pins the pulumi CLI's main package so `go mod tidy` keeps its
// dependencies in this module's go.sum.
package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
