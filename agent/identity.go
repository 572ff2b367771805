package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/protocol"
)

// Metadata reads the droplet's identity from DigitalOcean's metadata service
// (GET <BaseURL>/id and /region, plain text; docs/operations.md, "Agent").
type Metadata struct {
	// BaseURL is DefaultMetadataURL, or a test server's.
	BaseURL string
	// HTTP is the client; nil means one with MetadataTimeout.
	HTTP *http.Client
}

// Get fetches one plain-text item (e.g. "id"). Errors: transport, a non-200
// answer, or an empty value.
func (m Metadata) Get(ctx context.Context, item string) (string, error) {
	hc := m.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: MetadataTimeout}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(m.BaseURL, "/")+"/"+item, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("metadata %s: %w", item, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", fmt.Errorf("metadata %s: %w", item, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("metadata %s: status %d", item, resp.StatusCode)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("metadata %s: empty", item)
	}
	return v, nil
}

// Identity is the deployment the agent reports for.
type Identity struct {
	// DeploymentID defaults to "droplet-<dropletId>": a droplet id is never
	// reused, and neither is a reaped deployment's id.
	DeploymentID string
	// DropletID is the DigitalOcean droplet id (0: unknown).
	DropletID int64
	// Region is the droplet's region slug.
	Region string
}

// ResolveIdentity fills what the configuration left empty from the
// metadata service: the droplet id and region, and the deployment id
// "droplet-<id>". Nothing is asked when the configuration names the
// deployment, the droplet and the region. Errors: the metadata service
// fails and the deployment id is unknown (ErrNoIdentity).
func ResolveIdentity(ctx context.Context, cfg *Config) (Identity, error) {
	id := Identity{DeploymentID: cfg.DeploymentID, DropletID: cfg.DropletID, Region: cfg.Region}
	md := Metadata{BaseURL: cfg.MetadataURL, HTTP: cfg.MetadataHTTP}
	var errs []error
	if id.DropletID == 0 {
		v, err := md.Get(ctx, "id")
		if err == nil {
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || n <= 0 {
				err = fmt.Errorf("metadata id: not a droplet id")
			} else {
				id.DropletID = n
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if id.Region == "" {
		v, err := md.Get(ctx, "region")
		if err != nil {
			errs = append(errs, err)
		} else {
			id.Region = v
		}
	}
	if id.DeploymentID == "" && id.DropletID > 0 {
		id.DeploymentID = fmt.Sprintf("droplet-%d", id.DropletID)
	}
	if id.DeploymentID == "" {
		return id, fmt.Errorf("%w: give --deployment or let the agent reach the metadata service: %w", ErrNoIdentity, errors.Join(errs...))
	}
	return id, nil
}

// Credentials are the agent's signing key.
type Credentials struct {
	// KeyID is the X-Chalupa-Key-Id.
	KeyID string
	// Key is the raw HMAC key.
	Key []byte
}

// ReadCredentials reads the key id (cfg.KeyID, else the key-id file) and the
// key file. Errors: fs.ErrNotExist (wrapped) when a file is not there yet;
// ErrKeyExposed when the key file is readable by group or others; a bad
// key.
func ReadCredentials(cfg *Config) (Credentials, error) {
	fi, err := os.Stat(cfg.KeyFile)
	if err != nil {
		return Credentials{}, fmt.Errorf("key file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("%s: %w", cfg.KeyFile, ErrKeyExposed)
	}
	keyID := strings.TrimSpace(cfg.KeyID)
	if keyID == "" {
		b, err := os.ReadFile(cfg.keyIDFile())
		if err != nil {
			return Credentials{}, fmt.Errorf("key-id file: %w", err)
		}
		keyID = strings.TrimSpace(string(b))
	}
	b, err := os.ReadFile(cfg.KeyFile)
	if err != nil {
		return Credentials{}, fmt.Errorf("key file: %w", err)
	}
	key, err := protocol.DecodeKeyMaterial(string(b))
	if err != nil {
		return Credentials{}, fmt.Errorf("key file: %w", err)
	}
	if keyID == "" {
		return Credentials{}, fmt.Errorf("%w: %w", ErrBadConfig, errEmptyKeyID)
	}
	return Credentials{KeyID: keyID, Key: key}, nil
}

// WaitForCredentials reads the credentials, polling every KeyPollInterval
// (on clock) while a file does not exist yet: the key arrives over SSH
// after boot, so a missing key is a wait, never a failure. Files that exist
// but are not usable yet (unreadable, or not a whole key: notYet) are
// waited on for at most KeySettleTime. waiting is called once when the
// wait begins. Errors: ErrKeyExposed at once; a key still unusable after
// KeySettleTime; ctx's error.
func WaitForCredentials(ctx context.Context, cfg *Config, clock clockwork.Clock, waiting func(error)) (Credentials, error) {
	announced := false
	var unusableSince time.Time
	for {
		c, err := ReadCredentials(cfg)
		if err == nil {
			return c, nil
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			unusableSince = time.Time{}
		case notYet(err):
			if unusableSince.IsZero() {
				unusableSince = clock.Now()
			}
			if clock.Since(unusableSince) >= KeySettleTime {
				return Credentials{}, fmt.Errorf("%w (still unusable after %s)", err, KeySettleTime)
			}
		default:
			return Credentials{}, err
		}
		if !announced && waiting != nil {
			waiting(err)
			announced = true
		}
		select {
		case <-ctx.Done():
			return Credentials{}, ctx.Err()
		case <-clock.After(KeyPollInterval):
		}
	}
}

// notYet reports whether err is what key files look like while they are
// still being put in place: not readable by the agent's user yet, a key
// that does not decode (partly written), an empty key id.
func notYet(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, protocol.ErrBadKeyMaterial) ||
		errors.Is(err, errEmptyKeyID)
}

// errEmptyKeyID: the key-id file exists and holds nothing (yet).
var errEmptyKeyID = errors.New("the key id is empty")

// keyIDFile is the key-id file: KeyIDFile, else "key-id" beside the key
// file (what `admin keys issue --out` writes).
func (c *Config) keyIDFile() string {
	if c.KeyIDFile != "" {
		return c.KeyIDFile
	}
	return filepath.Join(filepath.Dir(c.KeyFile), "key-id")
}

// waitIdentity resolves the identity, retrying on clock with a back-off
// doubling from RetryMin to one minute while the metadata service does not
// answer (it can lag the network at boot).
func waitIdentity(ctx context.Context, cfg *Config, clock clockwork.Clock, warn func(error)) (Identity, error) {
	delay := RetryMin
	warned := false
	for {
		id, err := ResolveIdentity(ctx, cfg)
		if err == nil {
			return id, nil
		}
		if !warned && warn != nil {
			warn(err)
			warned = true
		}
		select {
		case <-ctx.Done():
			return Identity{}, ctx.Err()
		case <-clock.After(delay):
		}
		delay = min(2*delay, time.Minute)
	}
}
