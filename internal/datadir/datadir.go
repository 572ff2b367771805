// Package datadir names what lives in chalupa's data directory and reads
// its generated-secrets file, for every command that needs them without the
// server's packages: the admin CLI reads the admin token from secrets.env,
// the test harness finds the database (docs/operations.md, "Embedded
// default"). A leaf: standard library only. The server (package daemon)
// owns writing the file.
package datadir

import (
	"bufio"
	"errors"
	"os"
	"strings"
)

// Names and defaults (docs/operations.md, "Configuration").
const (
	// DefaultDir holds the SQLite file, restore points and, on the
	// embedded default, the generated secrets and the file replica.
	DefaultDir = "./chalupa-data"
	// DefaultListen is loopback so that nothing is exposed before the
	// operator has set real secrets.
	DefaultListen = "127.0.0.1:8080"
	// SecretsFileName is the generated-secrets file in the data dir (0600).
	SecretsFileName = "secrets.env"
	// DatabaseFileName is the SQLite file in the data dir.
	DatabaseFileName = "chalupa.db"
)

// ReadSecrets parses the KEY=VALUE lines of a secrets file (blank lines
// and # comments skipped, spaces around keys and values trimmed). A missing
// file is an empty map; any other error is the file system's, returned as is.
func ReadSecrets(path string) (map[string]string, error) {
	out := map[string]string{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out, sc.Err()
}
