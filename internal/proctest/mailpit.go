package proctest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// MailpitStartTimeout bounds how long StartMailpit waits for mailpit's
// SMTP port and HTTP API to answer.
const MailpitStartTimeout = 30 * time.Second

// Mailpit is a running mailpit (github.com/axllent/mailpit, built by
// contrib/install-test-tools.sh): an SMTP server on 127.0.0.1 that takes
// mail only after STARTTLS (or, with ImplicitTLS, over TLS from the first
// byte) and PLAIN authentication as User, and keeps what it takes for the
// test to read through its HTTP API.
type Mailpit struct {
	// SMTPAddr is the SMTP listener, 127.0.0.1:PORT.
	SMTPAddr string
	// API is the HTTP API's base, http://127.0.0.1:PORT.
	API string
	// User and Password are the one account mailpit accepts.
	User, Password string
	// RootCAs trusts the server's certificate (a self-signed one for
	// 127.0.0.1 and localhost, made per server).
	RootCAs *x509.CertPool
	// ImplicitTLS is whether SMTP is TLS from the first byte (smtps://)
	// rather than STARTTLS.
	ImplicitTLS bool

	t    testing.TB
	logs *SyncBuffer
}

// StartMailpit starts mailpit with a fresh certificate, account and
// database in t.TempDir(), requiring STARTTLS (implicitTLS false) or TLS
// (true) and authentication, and returns once its SMTP port accepts and
// its API answers. t.Cleanup stops it. A missing tool skips the test, or
// fails it under CI=true (ToolPath).
func StartMailpit(t testing.TB, implicitTLS bool) *Mailpit {
	t.Helper()
	bin := ToolPath(t, "mailpit")
	dir := t.TempDir()
	certFile, keyFile, pool := selfSignedCert(t, dir)
	apiAddr := FreeAddr(t)
	m := &Mailpit{SMTPAddr: FreeAddr(t), API: "http://" + apiAddr, User: "chalupa-alerts", Password: RandomToken(24),
		RootCAs: pool, ImplicitTLS: implicitTLS, t: t, logs: &SyncBuffer{}}
	authFile := filepath.Join(dir, "smtp-auth")
	if err := os.WriteFile(authFile, []byte(m.User+":"+m.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--smtp", m.SMTPAddr, "--listen", apiAddr, "--database", filepath.Join(dir, "mailpit.db"),
		"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile, "--smtp-auth-file", authFile,
		"--disable-version-check", "--smtp-disable-rdns", "--quiet"}
	if implicitTLS {
		args = append(args, "--smtp-require-tls")
	} else {
		args = append(args, "--smtp-require-starttls")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv(nil)
	cmd.Stdout, cmd.Stderr = m.logs, m.logs
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mailpit: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("mailpit output:\n%s", tail(m.logs.String(), 16<<10))
		}
	})
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(MailpitStartTimeout)
	for {
		select {
		case <-done:
			t.Fatalf("mailpit exited before answering (%s); output:\n%s", cmd.ProcessState, tail(m.logs.String(), 8<<10))
		default:
		}
		if c, err := net.DialTimeout("tcp", m.SMTPAddr, time.Second); err == nil {
			c.Close()
			if resp, err := hc.Get(m.API + "/api/v1/info"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return m
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mailpit did not answer within %s; output:\n%s", MailpitStartTimeout, tail(m.logs.String(), 8<<10))
		}
		time.Sleep(PollInterval)
	}
}

// SMTPURL is the sink's URL of this server: smtp://USER@127.0.0.1:PORT, or
// smtps:// with ImplicitTLS.
func (m *Mailpit) SMTPURL() string {
	scheme := "smtp"
	if m.ImplicitTLS {
		scheme = "smtps"
	}
	return (&url.URL{Scheme: scheme, User: url.User(m.User), Host: m.SMTPAddr}).String()
}

// MailpitAddress is an address in mailpit's API.
type MailpitAddress struct {
	Name, Address string
}

// MailpitSummary is one message in mailpit's list.
type MailpitSummary struct {
	// ID is mailpit's own id (for Message and Raw).
	ID string
	// MessageID is the Message-ID header, without angle brackets.
	MessageID string
	From      MailpitAddress
	To        []MailpitAddress
	Subject   string
}

// MailpitMessage is one message as mailpit parsed it.
type MailpitMessage struct {
	MailpitSummary
	// Text and HTML are the decoded plain-text and HTML parts.
	Text, HTML string
}

// Messages lists what mailpit holds, newest first. Errors fail the test.
func (m *Mailpit) Messages() []MailpitSummary {
	m.t.Helper()
	var out struct{ Messages []MailpitSummary }
	m.get("/api/v1/messages", &out)
	return out.Messages
}

// Message is one message, parsed. Errors fail the test.
func (m *Mailpit) Message(id string) MailpitMessage {
	m.t.Helper()
	var out MailpitMessage
	m.get("/api/v1/message/"+url.PathEscape(id), &out)
	return out
}

// Raw is one message's source as mailpit received it. Errors fail the
// test.
func (m *Mailpit) Raw(id string) string {
	m.t.Helper()
	return string(m.fetch("/api/v1/message/" + url.PathEscape(id) + "/raw"))
}

func (m *Mailpit) get(path string, v any) {
	m.t.Helper()
	if err := json.Unmarshal(m.fetch(path), v); err != nil {
		m.t.Fatalf("mailpit %s: %v", path, err)
	}
}

func (m *Mailpit) fetch(path string) []byte {
	m.t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(m.API + path)
	if err != nil {
		m.t.Fatalf("mailpit %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		m.t.Fatalf("mailpit %s: %d %v: %s", path, resp.StatusCode, err, b)
	}
	return b
}

// selfSignedCert writes a fresh ECDSA certificate for 127.0.0.1, ::1 and
// localhost and its key into dir, and returns their paths and a pool
// trusting it.
func selfSignedCert(t testing.TB, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "chalupa test mail server"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "smtp.crt"), filepath.Join(dir, "smtp.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
