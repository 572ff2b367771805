//go:build unix

package storage

import (
	"fmt"
	"syscall"
)

// Statfs measures the filesystem holding path with statfs(2): one system
// call, no I/O on the disk. Errors: statfs's, wrapped (the path is not in
// the message).
func Statfs(path string) (DiskSpace, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return DiskSpace{}, fmt.Errorf("statfs: %w", err)
	}
	bsize := uint64(st.Bsize) //nolint:unconvert // int64 on Linux, uint32 elsewhere
	return DiskSpace{Free: uint64(st.Bavail) * bsize, Total: uint64(st.Blocks) * bsize}, nil
}
