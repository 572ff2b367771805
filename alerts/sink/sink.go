// Package sink holds what the delivery channels under it share
// (docs/operations.md, "Alerts", under Sinks): how a failed send is told
// apart without naming where it went. A sink's URL or server can carry a
// token (a chat webhook's path, a password), so errors say what kind of
// failure it was, never the address.
package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/chalupa-run/chalupa/alerts"
)

// Failure names a transport failure in a few fixed words, without the
// address, URL or server reply that the wrapped error may carry: "timed
// out", "connection refused", "connection reset", "closed the connection",
// "TLS failed", "name lookup failed", "network error". A nil err is "".
func Failure(err error) string {
	var (
		dns  *net.DNSError
		cert *tls.CertificateVerificationError
		hn   x509.HostnameError
		ua   x509.UnknownAuthorityError
		ci   x509.CertificateInvalidError
		rec  tls.RecordHeaderError
		ae   tls.AlertError
		ne   net.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed the connection"
	case errors.As(err, &dns):
		return "name lookup failed"
	case errors.As(err, &cert), errors.As(err, &hn), errors.As(err, &ua), errors.As(err, &ci), errors.As(err, &rec), errors.As(err, &ae):
		return "TLS failed"
	}
	return "network error"
}

// SubjectsLine names a message's subjects, comma-separated, with "and N
// more" for a coalesced message (docs/operations.md, "Alerts", storms); ""
// when it has none.
func SubjectsLine(m alerts.Message) string {
	names := make([]string, len(m.Subjects))
	for i, s := range m.Subjects {
		names[i] = s.String()
	}
	line := strings.Join(names, ", ")
	if m.More > 0 {
		line += fmt.Sprintf(" and %d more", m.More)
	}
	return line
}
