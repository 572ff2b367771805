package smtp_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/smtp"
	"github.com/chalupa-run/chalupa/internal/proctest"
)

const (
	from = "chalupa alerts <alerts@ops.example.com>"
	to   = "oncall@example.com, Second Person <second@example.org>"
)

func message() alerts.Message {
	return alerts.Message{
		ID: "01JCHALUPA0000000000000042", AlertID: "01JALERT00000000000000042", Event: alerts.Fired,
		Kind: "disk-low", Severity: alerts.Critical,
		Subjects: []alerts.Subject{{Kind: "platform"}},
		Title:    "[critical] disk-low on platform — 2 % free",
		Text:     "The data disk has 2 % free.\nFirst: make room; ingest answers 503 disk_low until then. <b>not markup</b>",
		At:       time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC),
	}
}

// TestSendThroughMailpit: through a real SMTP server requiring STARTTLS
// (or TLS, for smtps://) and authentication, the message arrives with its
// title as the subject, every recipient, a plain-text and an HTML part,
// and a Message-ID derived from the message id that a re-send keeps; the
// password appears nowhere in what the server received.
func TestSendThroughMailpit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		implicit bool
	}{{"starttls", false}, {"smtps", true}} {
		t.Run(tc.name, func(t *testing.T) {
			mp := proctest.StartMailpit(t, tc.implicit)
			s, err := smtp.New(smtp.Config{URL: mp.SMTPURL(), Password: mp.Password, From: from, To: to, TLS: &tls.Config{RootCAs: mp.RootCAs}})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			m := message()
			for range 2 {
				if err := s.Send(context.Background(), m); err != nil {
					t.Fatalf("Send: %v", err)
				}
			}
			list := mp.Messages()
			if len(list) != 2 {
				t.Fatalf("mailpit holds %d messages, want 2", len(list))
			}
			wantID := m.ID + "@ops.example.com"
			for i, sum := range list {
				if sum.MessageID != wantID {
					t.Errorf("message %d: Message-ID %q, want %q (the same on a re-send)", i, sum.MessageID, wantID)
				}
				if sum.Subject != m.Title {
					t.Errorf("message %d: subject %q, want %q", i, sum.Subject, m.Title)
				}
				if sum.From.Address != "alerts@ops.example.com" {
					t.Errorf("message %d: from %+v", i, sum.From)
				}
				var got []string
				for _, a := range sum.To {
					got = append(got, a.Address)
				}
				if strings.Join(got, ",") != "oncall@example.com,second@example.org" {
					t.Errorf("message %d: recipients %v", i, got)
				}
				full := mp.Message(sum.ID)
				full.Text = strings.ReplaceAll(full.Text, "\r\n", "\n")
				if !strings.Contains(full.Text, m.Text) || !strings.Contains(full.Text, "Message "+m.ID) {
					t.Errorf("message %d: the text part lacks the message's text or id:\n%s", i, full.Text)
				}
				if !strings.Contains(full.HTML, "<h3>[critical] disk-low on platform — 2 % free</h3>") ||
					!strings.Contains(full.HTML, "&lt;b&gt;not markup&lt;/b&gt;") {
					t.Errorf("message %d: the HTML part lacks the escaped title or text:\n%s", i, full.HTML)
				}
				raw := mp.Raw(sum.ID)
				if strings.Contains(raw, mp.Password) {
					t.Errorf("message %d: the password is in the message's source", i)
				}
				if !strings.Contains(raw, "Content-Type: multipart/alternative;") ||
					strings.Index(raw, "text/plain") > strings.Index(raw, "text/html") {
					t.Errorf("message %d: not multipart/alternative with the plain part first:\n%s", i, raw)
				}
			}
		})
	}
}

// TestTitleCannotAddHeaders: a title with a line break and a header after
// it arrives as the subject, and the message gains no recipient.
func TestTitleCannotAddHeaders(t *testing.T) {
	mp := proctest.StartMailpit(t, false)
	s, err := smtp.New(smtp.Config{URL: mp.SMTPURL(), Password: mp.Password, From: from, To: "oncall@example.com", TLS: &tls.Config{RootCAs: mp.RootCAs}})
	if err != nil {
		t.Fatal(err)
	}
	m := message()
	m.Title = "[critical] disk-low\r\nBcc: intruder@example.net\r\nX-Injected: yes"
	m.Kind = "disk-low\r\nX-Injected-Kind: yes"
	if err := s.Send(context.Background(), m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	list := mp.Messages()
	if len(list) != 1 {
		t.Fatalf("mailpit holds %d messages, want 1", len(list))
	}
	raw := mp.Raw(list[0].ID)
	head, _, _ := strings.Cut(raw, "\r\n\r\n")
	for _, bad := range []string{"\r\nBcc:", "\r\nX-Injected:", "\r\nX-Injected-Kind:"} {
		if strings.Contains(head, bad) {
			t.Errorf("the title added %q to the header:\n%s", strings.TrimSpace(bad), head)
		}
	}
	if len(list[0].To) != 1 {
		t.Errorf("recipients %+v, want oncall@example.com alone", list[0].To)
	}
}

// TestMailpitRefusals: a wrong password is refused for good (535, a
// permanent error without the password), and a server whose certificate
// the sink does not trust gets nothing (a retryable TLS failure).
func TestMailpitRefusals(t *testing.T) {
	mp := proctest.StartMailpit(t, false)
	t.Run("wrong password", func(t *testing.T) {
		wrong := "wrong-" + mp.Password
		s, err := smtp.New(smtp.Config{URL: mp.SMTPURL(), Password: wrong, From: from, To: to, TLS: &tls.Config{RootCAs: mp.RootCAs}})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), message())
		if !errors.Is(err, alerts.ErrPermanent) || !strings.Contains(err.Error(), "AUTH") {
			t.Fatalf("Send: %v, want a permanent AUTH refusal", err)
		}
		if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), mp.SMTPAddr) {
			t.Errorf("the error %q carries the password or the server's address", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		s, err := smtp.New(smtp.Config{URL: mp.SMTPURL(), Password: mp.Password, From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Send(context.Background(), message())
		if err == nil || errors.Is(err, alerts.ErrPermanent) || err.Error() != "email: STARTTLS: TLS failed" {
			t.Fatalf("Send: %v, want the retryable %q", err, "email: STARTTLS: TLS failed")
		}
	})
	if n := len(mp.Messages()); n != 0 {
		t.Errorf("mailpit holds %d messages after the refusals, want 0", n)
	}
}

// script is a minimal SMTP server on 127.0.0.1 answering each command by
// the first matching prefix in replies (default 250); it records the
// commands it was sent.
type script struct {
	addr    string
	mu      sync.Mutex
	cmds    []string
	replies map[string]string
}

func newScript(t *testing.T, greet bool, ehlo string, replies map[string]string) *script {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &script{addr: ln.Addr().String(), replies: replies}
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if !greet {
					<-hold
					return
				}
				w := bufio.NewWriter(c)
				r := bufio.NewReader(c)
				say := func(l string) { w.WriteString(l + "\r\n"); w.Flush() }
				say("220 test ESMTP")
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					line = strings.TrimRight(line, "\r\n")
					s.mu.Lock()
					s.cmds = append(s.cmds, line)
					s.mu.Unlock()
					verb := strings.ToUpper(strings.Fields(line + " x")[0])
					switch {
					case verb == "EHLO":
						say(ehlo)
						continue
					case verb == "QUIT":
						say("221 bye")
						return
					}
					reply := "250 ok"
					for p, rep := range s.replies {
						if strings.HasPrefix(strings.ToUpper(line), p) {
							reply = rep
						}
					}
					say(reply)
				}
			}()
		}
	}()
	return s
}

func (s *script) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

// TestRefusesWithoutSTARTTLS: an smtp:// server that does not offer
// STARTTLS gets no AUTH and no MAIL: the sink refuses to send in clear
// text, for good.
func TestRefusesWithoutSTARTTLS(t *testing.T) {
	srv := newScript(t, true, "250-test\r\n250 AUTH PLAIN LOGIN", nil)
	s, err := smtp.New(smtp.Config{URL: "smtp://user@" + srv.addr, Password: "p4ssw0rd-never-in-clear", From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Send(context.Background(), message())
	if !errors.Is(err, alerts.ErrPermanent) || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("Send: %v, want a permanent refusal naming STARTTLS", err)
	}
	for _, c := range srv.commands() {
		if v := strings.ToUpper(strings.Fields(c)[0]); v == "AUTH" || v == "MAIL" {
			t.Errorf("the sink sent %q in clear text", c)
		}
	}
}

// TestReplyCodes: 4xx replies are retried, 5xx are permanent; the error
// names the step and the code, never the server's text.
func TestReplyCodes(t *testing.T) {
	// The script speaks plain SMTP; a local TLS terminator in front of
	// it lets the sink reach it as smtps://, so the replies under test
	// come after a real TLS handshake.
	for _, tc := range []struct {
		name, prefix, reply string
		perm                bool
	}{
		{"mail 451", "MAIL", "451 4.3.0 try later secret-text", false},
		{"rcpt 550", "RCPT", "550 5.1.1 no such user secret-text", true},
		{"data 421", "DATA", "421 4.4.2 closing secret-text", false},
		{"data 554", "DATA", "554 5.6.0 body refused secret-text", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScript(t, true, "250 test", map[string]string{tc.prefix: tc.reply})
			addr := tlsFront(t, srv.addr)
			s, err := smtp.New(smtp.Config{URL: "smtps://" + addr, From: from, To: to, TLS: &tls.Config{InsecureSkipVerify: true}})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Send(context.Background(), message())
			if err == nil {
				t.Fatal("Send: nil, want an error")
			}
			if errors.Is(err, alerts.ErrPermanent) != tc.perm {
				t.Errorf("Send: %v; permanent = %v, want %v", err, !tc.perm, tc.perm)
			}
			if strings.Contains(err.Error(), "secret-text") || !strings.Contains(err.Error(), tc.reply[:3]) {
				t.Errorf("Send: %q, want the code without the server's text", err)
			}
		})
	}
}

// TestTimeout: a server that never greets is a retryable timeout within
// the caller's deadline (the connection's deadline or the context's,
// whichever fires first).
func TestTimeout(t *testing.T) {
	srv := newScript(t, false, "", nil)
	s, err := smtp.New(smtp.Config{URL: "smtp://" + srv.addr, From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = s.Send(ctx, message())
	if err == nil || errors.Is(err, alerts.ErrPermanent) || !strings.HasPrefix(err.Error(), "email: ") || !strings.HasSuffix(err.Error(), "timed out") {
		t.Fatalf("Send: %v, want a retryable timeout", err)
	}
}

// tlsFront terminates TLS on a new 127.0.0.1 port and relays to addr in
// plain text, with a throwaway certificate.
func tlsFront(t *testing.T, addr string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{throwawayCert(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { copyClose(b, c) }()
			go func() { copyClose(c, b) }()
		}
	}()
	return ln.Addr().String()
}

// throwawayCert is a fresh self-signed certificate for 127.0.0.1.
func throwawayCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func copyClose(dst, src net.Conn) {
	buf := make([]byte, 4096)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// TestNewRefuses: New refuses each bad setting with the error naming its
// variable, never repeating the value.
func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    smtp.Config
		want error
	}{
		{"not smtp", smtp.Config{URL: "http://mail.example.com", From: from, To: to}, smtp.ErrURL},
		{"no host", smtp.Config{URL: "smtp://", From: from, To: to}, smtp.ErrURL},
		{"path", smtp.Config{URL: "smtp://mail.example.com/x", From: from, To: to}, smtp.ErrURL},
		{"password in URL", smtp.Config{URL: "smtp://user:hunter2-secret@mail.example.com", From: from, To: to}, smtp.ErrPasswordInURL},
		{"user without password", smtp.Config{URL: "smtp://user@mail.example.com", From: from, To: to}, smtp.ErrPassword},
		{"password without user", smtp.Config{URL: "smtp://mail.example.com", Password: "hunter2-secret", From: from, To: to}, smtp.ErrPassword},
		{"no from", smtp.Config{URL: "smtp://mail.example.com", To: to}, smtp.ErrFrom},
		{"from without domain", smtp.Config{URL: "smtp://mail.example.com", From: "alerts", To: to}, smtp.ErrFrom},
		{"no to", smtp.Config{URL: "smtp://mail.example.com", From: from}, smtp.ErrTo},
		{"bad to", smtp.Config{URL: "smtp://mail.example.com", From: from, To: "a@example.com, not an address"}, smtp.ErrTo},
		{"too many to", smtp.Config{URL: "smtp://mail.example.com", From: from, To: strings.Repeat("a@example.com,", 20) + "b@example.com"}, smtp.ErrTo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := smtp.New(tc.c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the refusal %q repeats the password", err)
			}
		})
	}
	s, err := smtp.New(smtp.Config{URL: "smtps://user@mail.example.com", Password: "hunter2-secret", From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Preview(), "smtps://mail.example.com:465 (TLS; user user, password set (secret)) from alerts@ops.example.com to 2 recipient(s)"; got != want {
		t.Errorf("Preview = %q, want %q", got, want)
	}
}
