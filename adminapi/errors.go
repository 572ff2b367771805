package adminapi

import "fmt"

// ErrorBody is every error response: {"error":{"code","message"}}. code is
// stable and machine-readable; message is for people and never carries SQL,
// key material, tokens, URLs or fleet data (docs/operations.md, "HTTP surface and errors").
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// JobID names the live job that holds a busy converge scope (409
	// job_in_progress); omitted otherwise.
	JobID string `json:"jobId,omitempty"`
}

// APIError is a non-2xx answer from the daemon.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code and Message are the error body's; empty when the body was not
	// an ErrorBody.
	Code    string
	Message string
	// JobID is the error body's jobId: the live job of a busy scope.
	JobID string
	// Origin is the daemon's origin that answered (scheme://host:port, no
	// path or query) and From how it was chosen (Client.BaseURLFrom);
	// empty when unknown.
	Origin, From string
}

// Error is "code: message (HTTP status)", or, for an answer that is not a
// chalupa error body (a proxy's page, another server), one that names the
// origin that gave it.
func (e *APIError) Error() string {
	if e.Code == "" {
		if e.Origin != "" {
			return fmt.Sprintf("%s answered HTTP %d, not a chalupa error body", e.Where(), e.Status)
		}
		return fmt.Sprintf("daemon answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

// Where is "the daemon at ORIGIN (how it was chosen)", or "" when the
// origin is unknown: what a client adds to a refusal that may come from a
// daemon it did not mean to reach (401 unauthorized).
func (e *APIError) Where() string {
	switch {
	case e.Origin == "":
		return ""
	case e.From == "":
		return "the daemon at " + e.Origin
	}
	return "the daemon at " + e.Origin + " (" + e.From + ")"
}
