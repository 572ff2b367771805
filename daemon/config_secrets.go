package daemon

import (
	"os"
	"path/filepath"
)

// SecretsConfig are the bearer tokens and keys of the control plane
// (docs/operations.md, "Configuration" and "Embedded default").
type SecretsConfig struct {
	// AdminToken is CHALUPA_ADMIN_TOKEN, the admin API's bearer token.
	AdminToken Secret
	// ReadyToken is CHALUPA_READY_TOKEN, the bearer of /api/ready and
	// /metrics.
	ReadyToken Secret
	// IngestMasterKey is CHALUPA_INGEST_MASTER_KEY, base64 of 32 bytes.
	IngestMasterKey Secret
	// IngestKey is CHALUPA_INGEST_KEY, the deprecated shared ingest key.
	IngestKey Secret
	// Generated lists the secrets taken from the generated-secrets file (the
	// embedded default) rather than the environment.
	Generated []string `json:"generated,omitempty"`
	// File is the path of that file when it is (or will be) used.
	File string `json:"secretsFile,omitempty"`
}

// generatedSecrets are the variables the embedded default may generate.
var generatedSecrets = []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_MASTER_KEY"}

// validateSecrets takes the generated secrets from the data dir's secrets
// file on a loopback listener, requires them from the environment off
// loopback and checks their strength and separation.
func (c *Config) validateSecrets(l *loader) {
	s := &c.Secrets
	s.File = filepath.Join(c.DataDir, SecretsFileName)
	fileSecrets, err := ReadSecretsFile(s.File)
	if err != nil {
		l.bad("%s cannot be read (%s)", SecretsFileName, errKind(err))
	} else if fi, err := os.Stat(s.File); err == nil && fi.Mode().Perm()&0o077 != 0 {
		// Like sshd with a private key: a secrets file others can read is
		// a leak already, not something to start on.
		l.bad("%s is readable by group or others (chmod 600 %s)", SecretsFileName, s.File)
	}
	for _, g := range []struct {
		name string
		p    *Secret
	}{{"CHALUPA_ADMIN_TOKEN", &s.AdminToken}, {"CHALUPA_READY_TOKEN", &s.ReadyToken}, {"CHALUPA_INGEST_MASTER_KEY", &s.IngestMasterKey}} {
		if *g.p == "" && l.loopback {
			s.Generated = append(s.Generated, g.name)
			*g.p = Secret(fileSecrets[g.name])
		}
	}
	if len(s.Generated) == 0 {
		s.File = ""
	}
	if !l.loopback && l.listenOK {
		for _, k := range generatedSecrets {
			if l.get(k) == "" {
				l.bad("%s is required when CHALUPA_LISTEN is not a loopback address", k)
			}
		}
	}
	checkToken := func(k string, v Secret) {
		if v != "" && len(v) < minTokenLen {
			l.bad("%s must be at least %d characters", k, minTokenLen)
		}
	}
	checkToken("CHALUPA_ADMIN_TOKEN", s.AdminToken)
	checkToken("CHALUPA_READY_TOKEN", s.ReadyToken)
	if s.AdminToken != "" && s.AdminToken == s.ReadyToken {
		l.bad("CHALUPA_READY_TOKEN must differ from CHALUPA_ADMIN_TOKEN (a leaked probe token must not grant admin)")
	}
	if s.IngestMasterKey != "" {
		if b, err := decodeKey(s.IngestMasterKey.Reveal()); err != nil || len(b) != 32 {
			l.bad("CHALUPA_INGEST_MASTER_KEY must be base64 of exactly 32 bytes")
		}
	}
	checkToken("CHALUPA_INGEST_KEY", s.IngestKey)
}

// sharedKey is CHALUPA_INGEST_KEY as ingest takes it (nil when unset).
func (s *SecretsConfig) sharedKey() []byte {
	if s.IngestKey == "" {
		return nil
	}
	return []byte(s.IngestKey.Reveal())
}
