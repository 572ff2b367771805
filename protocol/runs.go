package protocol

import "time"

// RunReportV1 is the body of POST /api/ingest/runs: one finished CI suite
// run with its artifacts as ArtifactRefV1 (unknown fields refused at every
// level; docs/operations.md, "Lifecycle events and runs").
type RunReportV1 struct {
	EnvironmentSlug string    `json:"environmentSlug" schema:"required,pattern=slug"`
	DeploymentID    string    `json:"deploymentId" schema:"required,pattern=id"`
	RunID           string    `json:"runId" schema:"required,pattern=id"`
	Suite           string    `json:"suite" schema:"required,pattern=suite"`
	Status          string    `json:"status" schema:"required,enum=passed|failed|cancelled|errored"`
	StartedAt       time.Time `json:"startedAt" schema:"required"`
	FinishedAt      time.Time `json:"finishedAt" schema:"required"`
	Commit          string    `json:"commit,omitempty" schema:"pattern=commit"`
	// Artifacts is required, an empty array when there are none (a
	// required tag on an array asks for the key, minItems for an item);
	// at most 64 (ingest.MaxArtifactsPerRun).
	Artifacts []ArtifactRefV1 `json:"artifacts" schema:"required,maxItems=64"`
}

// ArtifactRefV1 is a reference to one artifact of a run: exactly
// {"v":1,"name","mediaType","sizeBytes","sha256","locator"}. chalupa
// accepts V1 only. SizeBytes is in bytes; SHA256 is 64 hex digits.
type ArtifactRefV1 struct {
	V         int             `json:"v" schema:"required,minimum=1,maximum=1"`
	Name      string          `json:"name" schema:"required,pattern=artifactName"`
	MediaType string          `json:"mediaType" schema:"required,pattern=mediaType"`
	SizeBytes int64           `json:"sizeBytes" schema:"minimum=0"`
	SHA256    string          `json:"sha256" schema:"required,pattern=hex64"`
	Locator   ArtifactLocator `json:"locator" schema:"required"`
}

// ArtifactLocator is where an artifact is: {"kind":"https","url"} or
// {"kind":"local","id"}.
type ArtifactLocator struct {
	Kind string `json:"kind" schema:"required,enum=https|local"`
	// URL and ID are pointers so that a field present but empty is told
	// from an absent one: each kind has exactly its own field (ingest's
	// check: which field goes with which kind is not in the tags). URL is
	// at most 2048 bytes.
	URL *string `json:"url,omitempty" schema:"pattern=httpsURL,maxLength=2048"`
	ID  *string `json:"id,omitempty" schema:"pattern=localId,maxLength=128"`
}

// HTTPSLocator is the locator {"kind":"https","url":u}.
func HTTPSLocator(u string) ArtifactLocator { return ArtifactLocator{Kind: "https", URL: &u} }

// LocalLocator is the locator {"kind":"local","id":id}.
func LocalLocator(id string) ArtifactLocator { return ArtifactLocator{Kind: "local", ID: &id} }
