//go:build !unix

package storage

// Statfs is not available on this platform: ErrStatfsUnsupported, and the
// free-space guard never refuses.
func Statfs(path string) (DiskSpace, error) { return DiskSpace{}, ErrStatfsUnsupported }
