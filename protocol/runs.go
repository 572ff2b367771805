package protocol

import "time"

// RunReportV1 is the body of POST /api/ingest/runs: one finished CI suite
// run with its artifacts as ArtifactRefV1 (unknown fields refused at every
// level; docs/operations.md, "Lifecycle events and runs").
type RunReportV1 struct {
	EnvironmentSlug string          `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string          `json:"deploymentId" schema:"required,pattern=id"`
	RunID           string          `json:"runId" schema:"required,pattern=id"`
	Suite           string          `json:"suite"`
	Status          string          `json:"status" schema:"required,enum=passed|failed|cancelled|errored"`
	StartedAt       time.Time       `json:"startedAt"`
	FinishedAt      time.Time       `json:"finishedAt"`
	Commit          string          `json:"commit,omitempty" schema:"pattern=commit"`
	Artifacts       []ArtifactRefV1 `json:"artifacts"`
}

// ArtifactRefV1 is a reference to one artifact of a run: exactly
// {"v":1,"name","mediaType","sizeBytes","sha256","locator"}. chalupa
// accepts V1 only. SizeBytes is in bytes; SHA256 is 64 hex digits.
type ArtifactRefV1 struct {
	V         int             `json:"v"`
	Name      string          `json:"name"`
	MediaType string          `json:"mediaType"`
	SizeBytes int64           `json:"sizeBytes"`
	SHA256    string          `json:"sha256"`
	Locator   ArtifactLocator `json:"locator"`
}

// ArtifactLocator is where an artifact is: {"kind":"https","url"} or
// {"kind":"local","id"}.
type ArtifactLocator struct {
	Kind string `json:"kind"`
	// URL and ID are pointers so that a field present but empty is told
	// from an absent one: each kind has exactly its own field.
	URL *string `json:"url,omitempty"`
	ID  *string `json:"id,omitempty"`
}

// HTTPSLocator is the locator {"kind":"https","url":u}.
func HTTPSLocator(u string) ArtifactLocator { return ArtifactLocator{Kind: "https", URL: &u} }

// LocalLocator is the locator {"kind":"local","id":id}.
func LocalLocator(id string) ArtifactLocator { return ArtifactLocator{Kind: "local", ID: &id} }
