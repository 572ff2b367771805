//go:build unix

package daemon

import (
	"os"
	"path/filepath"
	"syscall"
)

// deviceOf is the device number of the filesystem holding path, or of its
// nearest existing parent when path does not exist yet.
func deviceOf(path string) (uint64, bool) {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return 0, false
			}
			return uint64(st.Dev), true //nolint:unconvert // not uint64 on every platform
		}
		if p == filepath.Dir(p) {
			return 0, false
		}
	}
}
