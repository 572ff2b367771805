//go:build !unix

package daemon

// deviceOf cannot tell filesystems apart on this platform.
func deviceOf(string) (uint64, bool) { return 0, false }
