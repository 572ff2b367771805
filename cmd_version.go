package main

import (
	"fmt"
	"runtime"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/storage"
)

type versionCmd struct{}

// Run prints the version.
func (versionCmd) Run() error {
	fmt.Printf("chalupa %s (%s, litestream %s)\n", daemon.Version, runtime.Version(), storage.LitestreamVersion)
	return nil
}
