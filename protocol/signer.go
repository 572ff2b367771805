package protocol

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header names of protocol v1.
const (
	HeaderKeyID     = "X-Chalupa-Key-Id"
	HeaderTimestamp = "X-Chalupa-Timestamp"
	HeaderNonce     = "X-Chalupa-Nonce"
	HeaderSignature = "X-Chalupa-Signature"
)

// Protocol limits (docs/operations.md, "Signed ingest").
const (
	// Version is the signature scheme prefix.
	Version = "v1"
	// MinNonceLen and MaxNonceLen bound a nonce, in characters of
	// [A-Za-z0-9_-].
	MinNonceLen = 16
	MaxNonceLen = 64
	// KeySize is the length of a per-environment key, in bytes.
	KeySize = 32
)

// Errors returned by the parsers. Their messages are safe to send to clients.
var (
	ErrBadSignatureHeader = errors.New("signature header must be v1=<64 hex characters>")
	ErrBadTimestamp       = errors.New("timestamp must be unix seconds")
	ErrBadNonce           = errors.New("nonce must be 16-64 characters of [A-Za-z0-9_-]")
	ErrBadKeyMaterial     = errors.New("key material must be base64url of 32 bytes")
)

// Canonical returns the string that is signed for one request. path is the
// request path without query string; body is the exact bytes sent.
func Canonical(timestamp, nonce, method, path string, body []byte) []byte {
	sum := sha256.Sum256(body)
	var b strings.Builder
	b.Grow(len(Version) + len(timestamp) + len(nonce) + len(method) + len(path) + 2*len(sum) + 5)
	b.WriteString(Version)
	b.WriteByte('\n')
	b.WriteString(timestamp)
	b.WriteByte('\n')
	b.WriteString(nonce)
	b.WriteByte('\n')
	b.WriteString(strings.ToUpper(method))
	b.WriteByte('\n')
	b.WriteString(path)
	b.WriteByte('\n')
	b.WriteString(hex.EncodeToString(sum[:]))
	return []byte(b.String())
}

// Sum returns the raw HMAC-SHA256 of the canonical string under key.
func Sum(key []byte, timestamp, nonce, method, path string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(Canonical(timestamp, nonce, method, path, body))
	return m.Sum(nil)
}

// Sign returns the X-Chalupa-Signature header value, "v1=<hex>".
func Sign(key []byte, timestamp, nonce, method, path string, body []byte) string {
	return Version + "=" + hex.EncodeToString(Sum(key, timestamp, nonce, method, path, body))
}

// Verify reports whether header (an X-Chalupa-Signature value) is the
// signature of the request under key, comparing in constant time.
// Errors: ErrBadSignatureHeader when header is not v1=<hex of 32 bytes>.
func Verify(key []byte, header, timestamp, nonce, method, path string, body []byte) (bool, error) {
	got, err := ParseSignature(header)
	if err != nil {
		return false, err
	}
	return hmac.Equal(got, Sum(key, timestamp, nonce, method, path, body)), nil
}

// ParseSignature decodes "v1=<64 hex>" into the 32 signature bytes.
// Errors: ErrBadSignatureHeader.
func ParseSignature(header string) ([]byte, error) {
	v, ok := strings.CutPrefix(header, Version+"=")
	if !ok || len(v) != 2*sha256.Size {
		return nil, ErrBadSignatureHeader
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil, ErrBadSignatureHeader
	}
	return b, nil
}

// ParseTimestamp parses unix seconds (decimal, optional leading '-', at most
// 12 digits, so absurd values cannot overflow a time computation).
// Errors: ErrBadTimestamp.
func ParseTimestamp(s string) (int64, error) {
	if digits := strings.TrimPrefix(s, "-"); digits == "" || len(digits) > 12 {
		return 0, ErrBadTimestamp
	}
	for i, c := range s {
		if (c < '0' || c > '9') && !(i == 0 && c == '-' && len(s) > 1) {
			return 0, ErrBadTimestamp
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, ErrBadTimestamp
	}
	return n, nil
}

// ValidNonce reports whether s is 16–64 characters of [A-Za-z0-9_-].
func ValidNonce(s string) bool {
	if len(s) < MinNonceLen || len(s) > MaxNonceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// NewNonce returns a fresh nonce: the current time in unix milliseconds as
// 12 lower-case hex digits, then 18 random bytes (144 bits) as 24
// base64url characters; 36 characters. The server treats a nonce as
// opaque; the time prefix only makes one key's nonces sort in the order
// they were made, so the server's per-key nonce index grows at its end
// (an insert dirties the page the previous one did) instead of at a random
// page: a heartbeat writes about 40 % fewer WAL bytes, which the daemon
// then fsyncs, checkpoints and replicates (docs/operations.md, "Signed
// ingest").
func NewNonce() string {
	return newNonceAt(time.Now())
}

// nonceTimeDigits is how many hex digits carry the time: 48 bits of unix
// milliseconds last until the year 10889.
const nonceTimeDigits = 12

// nonceRandomBytes is the nonce's random part: 144 bits, so two nonces of
// one key in the same millisecond never collide in practice.
const nonceRandomBytes = 18

func newNonceAt(t time.Time) string {
	const hexDigits = "0123456789abcdef"
	ms := uint64(max(t.UnixMilli(), 0))
	b := make([]byte, nonceTimeDigits, nonceTimeDigits+base64.RawURLEncoding.EncodedLen(nonceRandomBytes))
	for i := nonceTimeDigits - 1; i >= 0; i-- {
		b[i] = hexDigits[ms&0xf]
		ms >>= 4
	}
	r := make([]byte, nonceRandomBytes)
	_, _ = rand.Read(r) // crypto/rand.Read never fails (Go 1.24+)
	return string(base64.RawURLEncoding.AppendEncode(b, r))
}

// NewKeyMaterial returns fresh key material: 32 random bytes, base64url
// without padding (the form in an issuance response and in ingest.key).
func NewKeyMaterial() string {
	b := make([]byte, KeySize)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeKeyMaterial decodes base64url key material (padded or not,
// surrounding whitespace ignored) to its 32 raw bytes.
// Errors: ErrBadKeyMaterial.
func DecodeKeyMaterial(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != KeySize {
		return nil, ErrBadKeyMaterial
	}
	return b, nil
}
