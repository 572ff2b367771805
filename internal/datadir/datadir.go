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
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	// AddressFileName is the file in the data dir where a running serve
	// records the address it listens on (0600, one line, written
	// atomically once it accepts connections and removed when it stops),
	// so that the CLI finds a daemon moved off DefaultListen by
	// CHALUPA_LISTEN alone (docs/operations.md, "Embedded default").
	AddressFileName = "serve.addr"
	// DefaultURL is the daemon the CLI talks to when neither CHALUPA_URL
	// nor a recorded address names one: DefaultListen over http.
	DefaultURL = "http://" + DefaultListen
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

// addressHeader is the comment line above the address in AddressFileName.
const addressHeader = "# Written by chalupa serve: the address it listens on, for the CLI. Removed when it stops.\n"

// WriteAddress records addr (host:port, as the listener reports it) in
// dir's AddressFileName: written to a temporary file with mode 0600 and
// renamed over the old one, so a reader sees the old address or the new,
// never half of one. Errors are the file system's.
func WriteAddress(dir, addr string) error {
	path := filepath.Join(dir, AddressFileName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addressHeader+addr+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// RemoveAddress removes dir's AddressFileName when it still records addr
// (a later serve's address is left alone). A missing file is no error.
func RemoveAddress(dir, addr string) error {
	path := filepath.Join(dir, AddressFileName)
	if got, err := readAddress(path); err != nil || got != addr {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// readAddress is the first line of path that is not blank or a comment.
func readAddress(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", nil
}

// ErrNoAddress: the data dir holds no recorded address (no serve is
// running on it, or it stopped).
var ErrNoAddress = errors.New("no recorded serve address")

// DaemonURL is the http origin of the serve that recorded its address in
// dir, as the CLI reads it when CHALUPA_URL is unset. An address on every
// interface (0.0.0.0, ::, or no host) is read as loopback (127.0.0.1, ::1),
// where that serve also listens; an address on another host is refused, since
// plain http carries the admin token only to loopback (docs/operations.md,
// "Configuration"). Errors: ErrNoAddress (no file), or one naming the file
// when it cannot be read or holds no usable address.
func DaemonURL(dir string) (string, error) {
	path := filepath.Join(dir, AddressFileName)
	addr, err := readAddress(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", ErrNoAddress
	}
	if err != nil {
		return "", fmt.Errorf("%s cannot be read: %w", path, err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("%s holds no host:port address", path)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("%s records a listener that is not loopback: set CHALUPA_URL to the daemon's https origin", path)
	}
	return "http://" + net.JoinHostPort(host, port), nil
}
