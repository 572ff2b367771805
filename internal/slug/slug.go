// Package slug holds the one rule for environment slugs, shared by the
// admin API, signed ingest and the CLI (docs/operations.md, "Admin API").
package slug

import "github.com/chalupa-run/chalupa/internal/lazyre"

// Pattern is an environment slug: DNS-label-like, 2–63 characters of
// lowercase letters, digits and hyphens, starting with a letter or digit, so
// it fits in a hostname, a tag and a key id (env_<slug>_<16 hex>).
const Pattern = `^[a-z0-9][a-z0-9-]{1,62}$`

var re = lazyre.New(Pattern)

// Valid reports whether s matches Pattern.
func Valid(s string) bool { return re.MatchString(s) }

// IDPattern is an agent-chosen identifier: a deployment id or a telemetry
// session id, 1–128 characters of letters, digits and ._:- starting with a
// letter or digit (docs/operations.md, "Heartbeats and deadlines").
const IDPattern = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`

var idRE = lazyre.New(IDPattern)

// ValidID reports whether s matches IDPattern.
func ValidID(s string) bool { return idRE.MatchString(s) }
