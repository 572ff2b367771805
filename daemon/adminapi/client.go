package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxResponse bounds how much of a response the client reads (bytes).
const maxResponse = 8 << 20

// Client calls a running daemon's admin API.
type Client struct {
	// BaseURL is the daemon, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is CHALUPA_ADMIN_TOKEN.
	Token string
	// HTTP is the client used; nil means one with a 60 s timeout.
	HTTP *http.Client
}

// APIError is a non-2xx answer from the daemon.
type APIError struct {
	Status  int
	Code    string
	Message string
}

// Error is "code: message (HTTP status)".
func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("daemon answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

// Call invokes operation id with body (nil for none) and returns the raw
// response body of a 2xx answer. Errors: *APIError for a non-2xx answer (with
// the server's code), or a transport error that never includes the token.
func (c *Client) Call(ctx context.Context, id string, body []byte) ([]byte, error) {
	op, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("unknown operation %q", id)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, op.Method, strings.TrimRight(c.BaseURL, "/")+op.Path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("read %s response: %w", id, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode}
		var eb ErrorBody
		if json.Unmarshal(b, &eb) == nil {
			e.Code, e.Message = eb.Error.Code, eb.Error.Message
		}
		return nil, e
	}
	return b, nil
}

// call marshals in, invokes id, and unmarshals the answer into out.
func (c *Client) call(ctx context.Context, id string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode %s request: %w", id, err)
		}
	}
	b, err := c.Call(ctx, id, body)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s response: %w", id, err)
	}
	return nil
}

// Status calls adminGetStatus.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.call(ctx, OpGetStatus, nil, &s)
}

// CreateEnvironment calls adminCreateEnvironment. A duplicate slug is an
// *APIError with Status 409.
func (c *Client) CreateEnvironment(ctx context.Context, req CreateEnvironmentRequest) (Environment, error) {
	var e Environment
	return e, c.call(ctx, OpCreateEnvironment, req, &e)
}

// ListEnvironments calls adminListEnvironments.
func (c *Client) ListEnvironments(ctx context.Context) ([]Environment, error) {
	var l EnvironmentList
	return l.Environments, c.call(ctx, OpListEnvironments, nil, &l)
}

// IssueKey calls adminIssueIngestKey for the environment.
func (c *Client) IssueKey(ctx context.Context, slug string) (IssuedKey, error) {
	var k IssuedKey
	return k, c.call(ctx, OpIssueIngestKey, IngestKeyRequest{EnvironmentSlug: slug}, &k)
}

// RotateKeys calls adminRotateIngestKey for the environment.
func (c *Client) RotateKeys(ctx context.Context, slug string) (IssuedKey, error) {
	var k IssuedKey
	return k, c.call(ctx, OpRotateIngestKey, IngestKeyRequest{Action: "rotate", EnvironmentSlug: slug}, &k)
}

// RevokeKey calls adminRevokeIngestKey.
func (c *Client) RevokeKey(ctx context.Context, keyID string) (RevokedKey, error) {
	var k RevokedKey
	return k, c.call(ctx, OpRevokeIngestKey, IngestKeyRequest{Action: "revoke", KeyID: keyID}, &k)
}

// Fleet calls adminListFleet.
func (c *Client) Fleet(ctx context.Context) (Fleet, error) {
	var f Fleet
	return f, c.call(ctx, OpListFleet, nil, &f)
}
