package digitalocean

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/digitalocean/godo"
)

// Sentinel errors. Every error a Client method returns for an API call is
// an *Error whose Kind is one of these, so callers branch with errors.Is
// (docs/operations.md, "DigitalOcean API").
var (
	// ErrUnauthorized: DigitalOcean refused the token (401): unknown,
	// expired or deleted. For a customer token, the reaper marks it
	// invalid.
	ErrUnauthorized = errors.New("token refused")
	// ErrForbidden: the token lacks the scope the call needs (403).
	ErrForbidden = errors.New("token lacks the scope")
	// ErrNotFound: the resource does not exist (404). DeleteDroplet never
	// returns it: a droplet already gone is DeleteAlreadyGone.
	ErrNotFound = errors.New("not found")
	// ErrRateLimited: the API answered 429, or the client held the call
	// back because a budget is spent; RetryAt tells when to try again.
	ErrRateLimited = errors.New("rate limited")
	// ErrProvider: the API failed (5xx), could not be reached, timed out,
	// or answered something unusable (any other status, a malformed
	// body). Retry later with back-off.
	ErrProvider = errors.New("provider error")
)

// Error is a failed DigitalOcean call, reduced to what is safe to log,
// store in an event or show an operator: it never holds the token, a
// request URL, or the underlying godo or net/http error (whose messages
// hold URLs).
type Error struct {
	// Op is the Client method ("DeleteDroplet").
	Op string
	// Token is the label of the client's token ("write", "customer:acme").
	Token string
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Kind is one of the sentinel errors.
	Kind error
	// Reason is a short cause: the API's own message (with the token
	// removed, should it ever echo it) or a transport cause such as
	// "timeout" or "connection refused".
	Reason string
	// RequestID is the API's request id, for DigitalOcean support.
	RequestID string
	// RetryAt is when a rate-limited call may be tried again (Kind
	// ErrRateLimited only).
	RetryAt time.Time
	// ctxErr is context.Canceled or context.DeadlineExceeded when the
	// call's context ended, so errors.Is sees it too.
	ctxErr error
}

// Error is "digitalocean OP (TOKEN token): STATUS KIND: REASON".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "digitalocean %s (%s token): ", e.Op, e.Token)
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	b.WriteString(e.Kind.Error())
	if !e.RetryAt.IsZero() {
		fmt.Fprintf(&b, " until %s", e.RetryAt.UTC().Format(time.RFC3339))
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// Unwrap exposes the sentinel and, when the context ended, its error.
func (e *Error) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{e.Kind, e.ctxErr}
	}
	return []error{e.Kind}
}

// KindName names err's sentinel kind for an answer or a log field:
// token_refused, token_lacks_scope, not_found, rate_limited or
// provider_error, "unknown" for an error that is none of them (it carries
// no text of err, so never a token or URL).
func KindName(err error) string {
	for _, k := range []struct {
		kind error
		name string
	}{{ErrUnauthorized, "token_refused"}, {ErrForbidden, "token_lacks_scope"}, {ErrNotFound, "not_found"},
		{ErrRateLimited, "rate_limited"}, {ErrProvider, "provider_error"}} {
		if errors.Is(err, k.kind) {
			return k.name
		}
	}
	return "unknown"
}

// RetryAt returns when a call that failed with ErrRateLimited may be tried
// again, and false for any other error.
func RetryAt(err error) (time.Time, bool) {
	var e *Error
	if errors.As(err, &e) && e.Kind == ErrRateLimited {
		return e.RetryAt, true
	}
	return time.Time{}, false
}

// maxReasonLen bounds Error.Reason: an API message is a sentence; anything
// longer is not worth logging.
const maxReasonLen = 200

// errRedirect is returned by the HTTP client's redirect check: the API
// never redirects, and following one would send the request (and, through
// a careless transport, the token) somewhere else.
var errRedirect = errors.New("redirect refused")

// classify turns what godo returned into an *Error. parent is the caller's
// context (as opposed to the per-call deadline's).
func (c *Client) classify(parent context.Context, op string, resp *godo.Response, err error) *Error {
	e := &Error{Op: op, Token: c.label, Kind: ErrProvider}
	var er *godo.ErrorResponse
	switch {
	case errors.As(err, &er) && er.Response != nil:
		e.Status = er.Response.StatusCode
		e.Reason = c.scrub(er.Message)
		e.RequestID = c.scrub(er.RequestID)
		switch {
		case e.Status == http.StatusUnauthorized:
			e.Kind = ErrUnauthorized
		case e.Status == http.StatusForbidden:
			e.Kind = ErrForbidden
		case e.Status == http.StatusNotFound:
			e.Kind = ErrNotFound
		case e.Status == http.StatusTooManyRequests:
			e.Kind = ErrRateLimited
			c.mu.Lock()
			e.RetryAt = c.blockedUntil
			c.mu.Unlock()
		}
	case parent.Err() != nil:
		e.Reason, e.ctxErr = "canceled by the caller", parent.Err()
	case errors.Is(err, context.DeadlineExceeded):
		e.Reason = fmt.Sprintf("no answer within %s", c.timeout)
		e.ctxErr = context.DeadlineExceeded
	default:
		e.Reason = transportReason(err)
		if resp != nil && resp.Response != nil {
			e.Status = resp.StatusCode
		}
	}
	return e
}

// transportReason reduces an error without an API answer to its cause.
// Never err.Error(): net/http's errors quote the request URL.
func transportReason(err error) string {
	var (
		dnsErr  *net.DNSError
		netErr  net.Error
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
		certErr *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		header  tls.RecordHeaderError
	)
	switch {
	case errors.Is(err, errRedirect):
		return "the API answered with a redirect, which is never followed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dnsErr):
		return "host name not resolved"
	case errors.As(err, &certErr), errors.As(err, &unknown), errors.As(err, &header):
		return "TLS failure"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before the answer"
	case errors.As(err, &syntax), errors.As(err, &typeErr):
		return "malformed answer"
	}
	return "transport error"
}

// scrub makes an API-supplied string safe to carry: the token removed
// (should the API ever echo it), control characters dropped, length
// bounded.
func (c *Client) scrub(s string) string {
	if c.token != "" {
		s = strings.ReplaceAll(s, string(c.token), "[redacted]")
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		s = strings.ToValidUTF8(s[:maxReasonLen], "") + "…"
	}
	return strings.TrimSpace(s)
}
