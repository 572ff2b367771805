package daemon

import (
	"path/filepath"
	"strconv"

	"github.com/chalupa-run/chalupa/storage"
)

// DiskConfig is the free-space guard (docs/operations.md, "Quotas").
type DiskConfig struct {
	// MinFreeBytes is CHALUPA_MIN_FREE_BYTES: the free space in bytes the
	// data directory's filesystem keeps before signed ingest other than
	// heartbeats is refused 503 disk_low; storage.MinFreeAuto (unset) is
	// the larger of 1 GiB and 5 % of the filesystem, 0 turns the guard off.
	MinFreeBytes int64
}

// maxMinFreeBytes bounds CHALUPA_MIN_FREE_BYTES: 1 PiB, beyond any disk a
// control plane runs on.
const maxMinFreeBytes = 1 << 50

// loadDataDir reads CHALUPA_DATA_DIR and makes it absolute.
func (c *Config) loadDataDir(l *loader, v string) {
	c.DataDir = v
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if abs, err := filepath.Abs(c.DataDir); err != nil {
		l.bad("CHALUPA_DATA_DIR is not a usable path")
	} else {
		c.DataDir, l.dataDirOK = abs, true
	}
}

// minFreeText prints CHALUPA_MIN_FREE_BYTES as configured.
func minFreeText(n int64) string {
	switch n {
	case storage.MinFreeAuto:
		return "(default: the larger of 1 GiB and 5 % of the filesystem)"
	case 0:
		return "0 (free-space guard off: tests only)"
	}
	return strconv.FormatInt(n, 10)
}

// guard is the free-space guard on dataDir's filesystem (statfs nil: the
// real one).
func (k DiskConfig) guard(dataDir string, statfs storage.StatfsFunc) *storage.DiskGuard {
	return storage.NewDiskGuard(storage.DiskGuardConfig{Path: dataDir, MinFreeBytes: k.MinFreeBytes, Statfs: statfs})
}
