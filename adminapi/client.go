package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxResponse bounds how much of a response the client reads (bytes).
const maxResponse = 8 << 20

// defaultTimeout bounds one call when Client.HTTP is nil.
const defaultTimeout = 60 * time.Second

// Client calls a running daemon's admin API. Its typed methods (one per
// operation, named after the operationId without "admin") live in the
// domain files beside their operations.
type Client struct {
	// BaseURL is the daemon's origin, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is CHALUPA_ADMIN_TOKEN.
	Token string
	// HTTP is the client used; nil means one with a 60 s timeout.
	HTTP *http.Client
	// BaseURLFrom says how BaseURL was chosen (say "--url or CHALUPA_URL",
	// or the file it was read from), repeated in connection errors so a
	// caller sees which daemon it reached and why; empty says nothing.
	BaseURLFrom string
}

// TransportError is a call that got no HTTP answer (connection refused,
// a timeout, a TLS failure). Its message names the daemon's origin tried
// (BaseURL without user info, path or query: no token, no fleet data) and
// how it was chosen (BaseURLFrom), so that a client pointed at the wrong
// daemon, or at none, says so.
type TransportError struct {
	// Origin is the daemon's origin, scheme://host:port.
	Origin string
	// From is Client.BaseURLFrom.
	From string
	// Operation is the operationId called.
	Operation string
	// Err is the transport's error (the *url.Error's cause: its URL,
	// which may carry path and query parameters, is left out).
	Err error
}

// Error is "no answer from the daemon at ORIGIN (FROM) to OPERATION: ERR".
func (e *TransportError) Error() string {
	from := ""
	if e.From != "" {
		from = " (" + e.From + ")"
	}
	return fmt.Sprintf("no answer from the daemon at %s%s to %s: %v", e.Origin, from, e.Operation, e.Err)
}

// Unwrap is the transport's error (context.DeadlineExceeded, a
// *net.OpError, …).
func (e *TransportError) Unwrap() error { return e.Err }

// originOf is raw's scheme://host, without user info, path or query; a
// phrase in its place when raw does not parse as a URL with a host (raw
// itself might carry what must not be printed).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the configured daemon URL"
	}
	return u.Scheme + "://" + u.Host
}

// Call invokes operation id with its path and query parameters (nil for
// none; see Params) and body (nil for none) and returns the raw response
// body of a 2xx answer. Errors: a parameter the operation does not take or
// a missing path parameter; *APIError for a non-2xx answer (with the
// server's code); or a *TransportError naming the origin tried, never the
// token.
func (c *Client) Call(ctx context.Context, id string, params Params, body []byte) ([]byte, error) {
	op, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("unknown operation %q", id)
	}
	path, err := op.requestURL(params)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, op.Method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: defaultTimeout}
	}
	if op.Bound > 0 && hc.Timeout > 0 && hc.Timeout < op.Bound {
		// The operation takes longer than the client's usual bound.
		long := *hc
		long.Timeout = op.Bound
		hc = &long
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &TransportError{Origin: originOf(c.BaseURL), From: c.BaseURLFrom, Operation: id, Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("read %s response: %w", id, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Status: resp.StatusCode, Origin: originOf(c.BaseURL), From: c.BaseURLFrom}
		var eb ErrorBody
		if json.Unmarshal(b, &eb) == nil {
			e.Code, e.Message, e.JobID = eb.Error.Code, eb.Error.Message, eb.Error.JobID
		}
		return nil, e
	}
	return b, nil
}

// CallAs is what every typed method does, decoding the answer into a Resp
// of the caller's choosing: a type that embeds the operation's answer and
// shadows the fields added since earlier releases with pointers, say, so a
// key an older daemon did not send is told from its zero value. Errors as
// Call's, or a request that cannot be encoded or an answer that does not
// decode.
func CallAs[Resp any](ctx context.Context, c *Client, id string, in any) (Resp, error) {
	return call[Resp](ctx, c, id, in)
}

// call takes in's parameters (EncodeParams) and, when the operation has a
// body, marshals in as it (nil: no request), invokes id, and decodes the
// answer into a Resp. Every typed method is one line over it.
func call[Resp any](ctx context.Context, c *Client, id string, in any) (Resp, error) {
	var out Resp
	var body []byte
	var params Params
	if in != nil {
		params = EncodeParams(in)
		if op, ok := Lookup(id); !ok || op.HasBody() {
			var err error
			if body, err = json.Marshal(in); err != nil {
				return out, fmt.Errorf("encode %s request: %w", id, err)
			}
		}
	}
	b, err := c.Call(ctx, id, params, body)
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("decode %s response: %w", id, err)
	}
	return out, nil
}
