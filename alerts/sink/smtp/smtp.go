// Package smtp is the alert sink that mails each message over SMTP
// (CHALUPA_ALERT_SMTP_URL; docs/operations.md, "Alerts", under Sinks): plain
// text with a short HTML alternative, the title as the subject, and a
// Message-ID derived from the message's stable id, so a re-send is the same
// message to the receiving mail system.
//
// It never sends in clear text: smtp:// requires the server to offer
// STARTTLS and upgrades before anything else (refusing to send otherwise),
// and smtps:// is TLS from the first byte. The password authenticates with
// PLAIN only inside TLS. It uses the standard library's net/smtp, which is
// all this needs: one connection a message, STARTTLS, PLAIN.
package smtp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink"
)

// Defaults and limits (docs/operations.md, "Alerts", under Sinks).
const (
	// Name is the sink's name in logs, metrics and errors.
	Name = "email"
	// DefaultTimeout bounds one send (connect, TLS, authentication, the
	// message): a slow server must not hold the delivery of other
	// messages.
	DefaultTimeout = 30 * time.Second
	// SubmissionPort is smtp://'s port when the URL names none (mail
	// submission with STARTTLS, RFC 6409).
	SubmissionPort = "587"
	// ImplicitTLSPort is smtps://'s port when the URL names none (RFC
	// 8314).
	ImplicitTLSPort = "465"
	// MaxRecipients bounds CHALUPA_ALERT_EMAIL_TO: alerts go to the
	// people who run the fleet, not a mailing list.
	MaxRecipients = 20
)

// Errors of New and ParseURL: each names the variable, never its value.
var (
	// ErrURL: CHALUPA_ALERT_SMTP_URL is not smtp://[USER@]HOST[:PORT] or
	// smtps://[USER@]HOST[:PORT].
	ErrURL = errors.New("CHALUPA_ALERT_SMTP_URL must be smtp://[USER@]HOST[:PORT] (STARTTLS, port 587 by default) or smtps://[USER@]HOST[:PORT] (TLS, 465), with no password, path or query")
	// ErrPasswordInURL: the URL holds a password (it belongs in the
	// secrets file or CHALUPA_ALERT_SMTP_PASSWORD_FILE).
	ErrPasswordInURL = errors.New("CHALUPA_ALERT_SMTP_URL must not hold a password: put it in secrets.env as CHALUPA_ALERT_SMTP_PASSWORD or in the file CHALUPA_ALERT_SMTP_PASSWORD_FILE names")
	// ErrFrom: CHALUPA_ALERT_EMAIL_FROM is missing or not one address.
	ErrFrom = errors.New("CHALUPA_ALERT_EMAIL_FROM must be one email address (alerts@example.com or \"chalupa <alerts@example.com>\")")
	// ErrTo: CHALUPA_ALERT_EMAIL_TO is missing or not a comma-separated
	// list of 1–20 addresses.
	ErrTo = errors.New("CHALUPA_ALERT_EMAIL_TO must be a comma-separated list of 1–20 email addresses")
	// ErrPassword: a user without a password, or a password without a
	// user.
	ErrPassword = errors.New("CHALUPA_ALERT_SMTP_URL's user and the SMTP password go together: set both or neither")
)

// Config is one SMTP sink's settings.
type Config struct {
	// URL is CHALUPA_ALERT_SMTP_URL: smtp://[USER@]HOST[:PORT] or
	// smtps://[USER@]HOST[:PORT].
	URL string
	// Password is the SMTP password (from secrets.env or
	// CHALUPA_ALERT_SMTP_PASSWORD_FILE); required with a user.
	Password string
	// From is CHALUPA_ALERT_EMAIL_FROM.
	From string
	// To is CHALUPA_ALERT_EMAIL_TO, comma-separated.
	To string
	// TLS is the client TLS configuration; nil verifies the server
	// against the system's roots. Its ServerName is set to the URL's
	// host.
	TLS *tls.Config
}

// Sink mails messages through one SMTP server. It implements alerts.Sink;
// it is safe for concurrent use (one connection a message).
type Sink struct {
	host, port string
	implicit   bool
	user, pass string
	from       *mail.Address
	to         []*mail.Address
	tls        *tls.Config
}

var _ alerts.Sink = (*Sink)(nil)

// New checks c and returns its sink. Errors: ErrURL, ErrPasswordInURL,
// ErrFrom, ErrTo, ErrPassword.
func New(c Config) (*Sink, error) {
	s := &Sink{pass: c.Password}
	var err error
	if s.host, s.port, s.implicit, s.user, err = ParseURL(c.URL); err != nil {
		return nil, err
	}
	if (s.user == "") != (s.pass == "") {
		return nil, ErrPassword
	}
	if s.from, err = mail.ParseAddress(c.From); err != nil || domain(s.from.Address) == "" {
		return nil, ErrFrom
	}
	if s.to, err = ParseTo(c.To); err != nil {
		return nil, err
	}
	s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS != nil {
		s.tls = c.TLS.Clone()
	}
	s.tls.ServerName = s.host
	return s, nil
}

// ParseURL reads CHALUPA_ALERT_SMTP_URL: the host, the port (587 for smtp,
// 465 for smtps by default), whether TLS is implicit, and the user.
// Errors: ErrURL, ErrPasswordInURL.
func ParseURL(raw string) (host, port string, implicit bool, user string, err error) {
	u, perr := url.Parse(raw)
	if perr != nil || u.Hostname() == "" || u.Opaque != "" || (u.Scheme != "smtp" && u.Scheme != "smtps") ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", "", false, "", ErrURL
	}
	if _, ok := u.User.Password(); ok {
		return "", "", false, "", ErrPasswordInURL
	}
	implicit = u.Scheme == "smtps"
	port = u.Port()
	if port == "" {
		port = SubmissionPort
		if implicit {
			port = ImplicitTLSPort
		}
	}
	if n, e := strconv.Atoi(port); e != nil || n < 1 || n > 65535 {
		return "", "", false, "", ErrURL
	}
	return u.Hostname(), port, implicit, u.User.Username(), nil
}

// ParseTo reads CHALUPA_ALERT_EMAIL_TO. Errors: ErrTo.
func ParseTo(v string) ([]*mail.Address, error) {
	to, err := mail.ParseAddressList(v)
	if err != nil || len(to) == 0 || len(to) > MaxRecipients {
		return nil, ErrTo
	}
	return to, nil
}

// Name is "email".
func (s *Sink) Name() string { return Name }

// Preview is the sink's redacted description for `config check`: the
// scheme, host and port, the number of recipients, whether a password is
// set. Never the password; the addresses are the operator's own.
func (s *Sink) Preview() string {
	scheme, how := "smtp", "STARTTLS required"
	if s.implicit {
		scheme, how = "smtps", "TLS"
	}
	auth := "no authentication"
	if s.user != "" {
		auth = "user " + s.user + ", password set (secret)"
	}
	return fmt.Sprintf("%s://%s (%s; %s) from %s to %d recipient(s)", scheme, net.JoinHostPort(s.host, s.port), how, auth, s.from.Address, len(s.to))
}

// MessageID is the Message-ID of alert message id: "<ID@DOMAIN>", DOMAIN
// being the From address's. The same on every retry and re-send, so the
// receiving mail system and a person's client can drop duplicates.
func (s *Sink) MessageID(id string) string { return "<" + id + "@" + domain(s.from.Address) + ">" }

// Send mails m once, bounded by ctx and DefaultTimeout. A 5xx reply (a
// refused sender, recipient, authentication or body) wraps
// alerts.ErrPermanent, as does a smtp:// server that does not offer
// STARTTLS (the sink never sends in clear text) or offers no
// authentication while a user is set; 4xx replies, timeouts and broken
// connections are retried. Errors name the sink, the step and the reply
// code, never the server's text, the password or the addresses.
func (s *Sink) Send(ctx context.Context, m alerts.Message) error {
	body, err := s.compose(m)
	if err != nil {
		return fmt.Errorf("%s: compose: %w", Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	defer cancel()
	conn, err := s.dial(ctx)
	if err != nil {
		return fmt.Errorf("%s: connect: %s", Name, sink.Failure(err))
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	err = s.session(conn, body)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%s: %s", Name, sink.Failure(ctx.Err()))
	}
	return err
}

// dial connects, with TLS from the first byte for smtps://.
func (s *Sink) dial(ctx context.Context) (net.Conn, error) {
	addr := net.JoinHostPort(s.host, s.port)
	if s.implicit {
		d := &tls.Dialer{Config: s.tls}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// session speaks SMTP on conn: EHLO, STARTTLS unless TLS already,
// AUTH PLAIN when a user is set, MAIL, RCPT for each recipient, DATA.
func (s *Sink) session(conn net.Conn, body []byte) error {
	c, err := smtp.NewClient(conn, s.host)
	if err != nil {
		return stepError("greeting", err)
	}
	defer c.Close()
	if err := c.Hello(domain(s.from.Address)); err != nil {
		return stepError("EHLO", err)
	}
	if !s.implicit {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return fmt.Errorf("%s: the server does not offer STARTTLS; refusing to send in clear text: %w", Name, alerts.ErrPermanent)
		}
		if err := c.StartTLS(s.tls); err != nil {
			return stepError("STARTTLS", err)
		}
	}
	if s.user != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return fmt.Errorf("%s: the server offers no authentication but CHALUPA_ALERT_SMTP_URL names a user: %w", Name, alerts.ErrPermanent)
		}
		if err := c.Auth(smtp.PlainAuth("", s.user, s.pass, s.host)); err != nil {
			return stepError("AUTH", err)
		}
	}
	if err := c.Mail(s.from.Address); err != nil {
		return stepError("MAIL FROM", err)
	}
	for _, r := range s.to {
		if err := c.Rcpt(r.Address); err != nil {
			return stepError("RCPT TO", err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return stepError("DATA", err)
	}
	if _, err := w.Write(body); err != nil {
		return stepError("DATA", err)
	}
	if err := w.Close(); err != nil {
		return stepError("DATA", err)
	}
	_ = c.Quit() // the message is accepted; a lost QUIT answer changes nothing
	return nil
}

// stepError is a failed SMTP step: the reply code (5xx permanent, 4xx
// retried) or the kind of transport failure. The server's reply text is
// left out: it can repeat an address or a credential.
func stepError(step string, err error) error {
	var te *textproto.Error
	if errors.As(err, &te) {
		if te.Code >= 500 {
			return fmt.Errorf("%s: the server answered %d to %s: %w", Name, te.Code, step, alerts.ErrPermanent)
		}
		return fmt.Errorf("%s: the server answered %d to %s", Name, te.Code, step)
	}
	return fmt.Errorf("%s: %s: %s", Name, step, sink.Failure(err))
}

// compose is m as an RFC 5322 message: multipart/alternative with the
// plain text first and the HTML second, both quoted-printable UTF-8. Every
// header value taken from m is an RFC 2047 encoded word when it holds
// anything but printable ASCII, so a line break in a title cannot add a
// header (a Bcc) to the message. Its
// bytes depend on m and the configuration only (Date is m.At, the
// boundary derives from the id), so a re-send is the same message.
func (s *Sink) compose(m alerts.Message) ([]byte, error) {
	var b bytes.Buffer
	tos := make([]string, len(s.to))
	for i, a := range s.to {
		tos[i] = a.String()
	}
	hdr := [][2]string{
		{"From", s.from.String()},
		{"To", strings.Join(tos, ", ")},
		{"Subject", mime.QEncoding.Encode("utf-8", m.Title)},
		{"Date", m.At.Format(time.RFC1123Z)},
		{"Message-ID", s.MessageID(m.ID)},
		{"MIME-Version", "1.0"},
		// An automatic message (RFC 3834): no vacation replies.
		{"Auto-Submitted", "auto-generated"},
		{"X-Chalupa-Event", mime.QEncoding.Encode("utf-8", string(m.Event))},
		{"X-Chalupa-Severity", mime.QEncoding.Encode("utf-8", string(m.Severity))},
	}
	if m.Kind != "" {
		hdr = append(hdr, [2]string{"X-Chalupa-Kind", mime.QEncoding.Encode("utf-8", m.Kind)})
	}
	mw := multipart.NewWriter(&b)
	if err := mw.SetBoundary("chalupa-alternative-" + m.ID); err != nil {
		return nil, err
	}
	hdr = append(hdr, [2]string{"Content-Type", "multipart/alternative; boundary=\"" + mw.Boundary() + "\""})
	var head bytes.Buffer
	for _, h := range hdr {
		fmt.Fprintf(&head, "%s: %s\r\n", h[0], h[1])
	}
	head.WriteString("\r\n")
	for _, part := range []struct{ ctype, text string }{
		{"text/plain; charset=utf-8", PlainText(m)},
		{"text/html; charset=utf-8", HTML(m)},
	} {
		w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {part.ctype}, "Content-Transfer-Encoding": {"quoted-printable"}})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(w)
		if _, err := qp.Write([]byte(strings.ReplaceAll(part.text, "\n", "\r\n"))); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return append(head.Bytes(), b.Bytes()...), nil
}

// PlainText is the message's text part: the text, the subjects, and a
// footer with the event, severity, kind and message id.
func PlainText(m alerts.Message) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(m.Text, "\n"))
	b.WriteString("\n")
	if s := sink.SubjectsLine(m); s != "" {
		b.WriteString("\nSubjects: " + s + "\n")
	}
	fmt.Fprintf(&b, "\n-- \nchalupa alert: %s, %s", m.Event, m.Severity)
	if m.Kind != "" {
		b.WriteString(", " + m.Kind)
	}
	b.WriteString("\nMessage " + m.ID + "\n")
	return b.String()
}

// HTML is the message's short HTML alternative: the title, the text as
// preformatted lines, the subjects and the footer, every value escaped.
func HTML(m alerts.Message) string {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><body>\n")
	fmt.Fprintf(&b, "<h3>%s</h3>\n<pre style=\"white-space:pre-wrap\">%s</pre>\n", html.EscapeString(m.Title), html.EscapeString(strings.TrimRight(m.Text, "\n")))
	if s := sink.SubjectsLine(m); s != "" {
		fmt.Fprintf(&b, "<p>Subjects: %s</p>\n", html.EscapeString(s))
	}
	fmt.Fprintf(&b, "<p style=\"color:#666\">chalupa alert: %s, %s", html.EscapeString(string(m.Event)), html.EscapeString(string(m.Severity)))
	if m.Kind != "" {
		b.WriteString(", " + html.EscapeString(m.Kind))
	}
	fmt.Fprintf(&b, "<br>Message %s</p>\n</body></html>\n", html.EscapeString(m.ID))
	return b.String()
}

// domain is the part of an address after its last @, "" without one.
func domain(addr string) string {
	i := strings.LastIndex(addr, "@")
	if i < 0 {
		return ""
	}
	return addr[i+1:]
}
