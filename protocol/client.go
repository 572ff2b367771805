package protocol

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client sends protocol-v1 signed requests. Every attempt gets a fresh
// nonce and timestamp, so a retry is never a replay.
type Client struct {
	// BaseURL is the daemon's origin, e.g. https://chalupa.example.com.
	BaseURL string
	// KeyID is the X-Chalupa-Key-Id; empty uses the deprecated shared-key
	// path (no key id header).
	KeyID string
	// Key is the raw HMAC key (DecodeKeyMaterial of the issued material).
	Key []byte
	// HTTP is the transport; nil means a client with a 30 s timeout.
	HTTP *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Retries is how many times a 5xx or transport error is retried after
	// the first attempt (0 means no retry).
	Retries int
	// Backoff is the pause before the first retry, doubled each time;
	// zero means 500 ms.
	Backoff time.Duration
}

// Response is one answer to a signed request.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Body is the response body (at most 1 MiB is read).
	Body []byte
	// Header is the response header.
	Header http.Header
	// Attempts is how many requests were sent.
	Attempts int
}

// NewRequest builds a signed request for method and path (path may not carry
// a query string: the signature covers the path only). nonce and ts are
// usually NewNonce() and the current time; tests pass their own.
func (c *Client) NewRequest(ctx context.Context, method, path string, body []byte, nonce string, ts time.Time) (*http.Request, error) {
	u, err := url.Parse(c.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse base URL: %w", err)
	}
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	Attach(req.Header, c.KeyID, c.Key, strconv.FormatInt(ts.Unix(), 10), nonce, method, path, body)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// Attach sets the four protocol headers on h for a request (keyID empty
// omits X-Chalupa-Key-Id).
func Attach(h http.Header, keyID string, key []byte, timestamp, nonce, method, path string, body []byte) {
	if keyID != "" {
		h.Set(HeaderKeyID, keyID)
	}
	h.Set(HeaderTimestamp, timestamp)
	h.Set(HeaderNonce, nonce)
	h.Set(HeaderSignature, Sign(key, timestamp, nonce, method, path, body))
}

// Post sends body to path, signed, retrying a 5xx answer or a transport error
// up to Retries times with a fresh nonce each time. A 4xx is returned at once
// (a refusal is not transient). Errors: the last transport error when every
// attempt failed without an answer, or ctx's error.
func (c *Client) Post(ctx context.Context, path string, body []byte) (*Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	backoff := c.Backoff
	if backoff <= 0 {
		backoff = 500 * time.Millisecond
	}
	var lastErr error
	var last *Response
	for attempt := 1; attempt <= c.Retries+1; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return last, ctx.Err()
			case <-time.After(backoff):
			}
			backoff *= 2
		}
		req, err := c.NewRequest(ctx, http.MethodPost, path, body, NewNonce(), now())
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			continue
		}
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		last = &Response{Status: resp.StatusCode, Body: b, Header: resp.Header, Attempts: attempt}
		if rerr != nil {
			lastErr = rerr
			continue
		}
		if resp.StatusCode < 500 {
			return last, nil
		}
		lastErr = nil
	}
	if last != nil && lastErr == nil {
		return last, nil
	}
	if lastErr == nil {
		lastErr = errors.New("no attempt made")
	}
	return last, fmt.Errorf("post %s: %w", path, lastErr)
}
