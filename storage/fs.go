package storage

import "os"

// mkdirPrivate creates dir (and parents) readable by the owner only: restore
// points and replicas hold the same sensitive data as the database.
func mkdirPrivate(dir string) error {
	return os.MkdirAll(dir, 0o700)
}
