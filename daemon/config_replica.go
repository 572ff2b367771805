package daemon

import (
	"net/url"

	"github.com/chalupa-run/chalupa/storage"
)

// ReplicaConfig is Litestream's replica (docs/operations.md, "Replication").
type ReplicaConfig struct {
	// URL is CHALUPA_REPLICA_URL (file://DataDir/replica when unset).
	URL string
	// SpacesKey and SpacesSecret are CHALUPA_SPACES_KEY and
	// CHALUPA_SPACES_SECRET, an s3:// replica's credentials (and an s3://
	// Pulumi backend's).
	SpacesKey, SpacesSecret Secret
	// kind is "s3" or "file".
	kind string
}

// ReplicaKind is "s3" or "file".
func (c *Config) ReplicaKind() string { return c.Replica.kind }

// loadReplicaURL reads CHALUPA_REPLICA_URL, defaulting under the data dir.
func (c *Config) loadReplicaURL(_ *loader, v string) {
	c.Replica.URL = v
	if v == "" {
		c.Replica.URL = fileURL(c.DataDir, "replica")
	}
}

// validate checks the replica URL and that an s3:// replica has its
// credentials.
func (r *ReplicaConfig) validate(l *loader) {
	if kind, err := storage.ParseReplicaURL(r.URL); err != nil {
		l.bad("CHALUPA_REPLICA_URL: %v", err)
	} else {
		r.kind = kind
	}
	if r.kind == "s3" {
		if r.SpacesKey == "" {
			l.bad("CHALUPA_SPACES_KEY is required for an s3:// CHALUPA_REPLICA_URL")
		}
		if r.SpacesSecret == "" {
			l.bad("CHALUPA_SPACES_SECRET is required for an s3:// CHALUPA_REPLICA_URL")
		}
	}
}

// ReplicaSharesDataDisk reports whether the replica is a file:// replica on
// the data directory's filesystem (the embedded default is): it then fills
// the same disk as the database and is lost with it, so it is no backup
// against the disk's loss (docs/operations.md, "Replication"). Paths that
// do not exist yet are judged by their nearest existing parent.
func (c *Config) ReplicaSharesDataDisk() bool {
	if c.Replica.kind != "file" {
		return false
	}
	u, err := url.Parse(c.Replica.URL)
	if err != nil {
		return false
	}
	a, aok := deviceOf(c.DataDir)
	b, bok := deviceOf(u.Path)
	return aok && bok && a == b
}
