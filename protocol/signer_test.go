package protocol_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/protocol"
)

// vector is a fixed protocol-v1 test vector (docs/operations.md,
// "Signed ingest"). The expected values were computed outside Go (Python's
// hmac/hashlib) and are recomputed below with crypto/hmac from the literal
// canonical string, so neither side can drift without this test failing.
var vector = struct {
	key                              []byte
	ts, nonce, method, path          string
	body                             []byte
	canonical, bodySHA, signatureHex string
}{
	key:          seq(32),
	ts:           "1767225600",
	nonce:        "AAAAAAAAAAAAAAAA-_09azAZ",
	method:       "POST",
	path:         "/api/ingest/heartbeat",
	body:         []byte(`{"environmentSlug":"demo-harbor"}`),
	bodySHA:      "920bbadb3eda14d0b56d6ef3a806a9d12928c0341afde70f0913b03bc0552256",
	canonical:    "v1\n1767225600\nAAAAAAAAAAAAAAAA-_09azAZ\nPOST\n/api/ingest/heartbeat\n920bbadb3eda14d0b56d6ef3a806a9d12928c0341afde70f0913b03bc0552256",
	signatureHex: "d7ecdd196638ae9825b25e93946cfdd579c0c499ac68697cbb5efe3c1fc2fcfe",
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func TestCanonicalAndSignVector(t *testing.T) {
	v := vector
	sum := sha256.Sum256(v.body)
	if hex.EncodeToString(sum[:]) != v.bodySHA {
		t.Fatalf("body sha256 = %x, vector says %s", sum, v.bodySHA)
	}
	got := protocol.Canonical(v.ts, v.nonce, v.method, v.path, v.body)
	if string(got) != v.canonical {
		t.Fatalf("Canonical =\n%q\nwant\n%q", got, v.canonical)
	}
	// Independent computation of the signature from the literal canonical string.
	m := hmac.New(sha256.New, v.key)
	m.Write([]byte(v.canonical))
	independent := hex.EncodeToString(m.Sum(nil))
	if independent != v.signatureHex {
		t.Fatalf("crypto/hmac over the canonical string = %s, vector says %s", independent, v.signatureHex)
	}
	if s := protocol.Sign(v.key, v.ts, v.nonce, v.method, v.path, v.body); s != "v1="+v.signatureHex {
		t.Fatalf("Sign = %s, want v1=%s", s, v.signatureHex)
	}
	if s := protocol.Sum(v.key, v.ts, v.nonce, v.method, v.path, v.body); hex.EncodeToString(s) != v.signatureHex {
		t.Fatalf("Sum = %x, want %s", s, v.signatureHex)
	}
	ok, err := protocol.Verify(v.key, "v1="+v.signatureHex, v.ts, v.nonce, v.method, v.path, v.body)
	if err != nil || !ok {
		t.Fatalf("Verify of the vector = %v, %v", ok, err)
	}
	// Upper-case hex is the same signature.
	ok, err = protocol.Verify(v.key, "v1="+strings.ToUpper(v.signatureHex), v.ts, v.nonce, v.method, v.path, v.body)
	if err != nil || !ok {
		t.Fatalf("Verify of upper-case hex = %v, %v", ok, err)
	}
}

func TestCanonicalEmptyBodyAndMethodCase(t *testing.T) {
	got := string(protocol.Canonical("1", "n", "post", "/p", nil))
	want := "v1\n1\nn\nPOST\n/p\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got != want {
		t.Fatalf("Canonical = %q, want %q (method upper-cased, sha256 of empty body)", got, want)
	}
}

// Every signed component changes the signature.
func TestSignCoversEveryComponent(t *testing.T) {
	v := vector
	base := protocol.Sign(v.key, v.ts, v.nonce, v.method, v.path, v.body)
	other := bytes.Clone(v.key)
	other[31] ^= 1
	variants := map[string]string{
		"key":       protocol.Sign(other, v.ts, v.nonce, v.method, v.path, v.body),
		"timestamp": protocol.Sign(v.key, "1767225601", v.nonce, v.method, v.path, v.body),
		"nonce":     protocol.Sign(v.key, v.ts, v.nonce+"x", v.method, v.path, v.body),
		"method":    protocol.Sign(v.key, v.ts, v.nonce, "PUT", v.path, v.body),
		"path":      protocol.Sign(v.key, v.ts, v.nonce, v.method, "/api/ingest/telemetry", v.body),
		"body":      protocol.Sign(v.key, v.ts, v.nonce, v.method, v.path, append(bytes.Clone(v.body), ' ')),
		// Moving a separator between fields must not produce the same string.
		"shifted": protocol.Sign(v.key, v.ts+"\n"+v.nonce[:4], v.nonce[4:], v.method, v.path, v.body),
	}
	for name, s := range variants {
		t.Run(name, func(t *testing.T) {
			if s == base {
				t.Errorf("changing the %s does not change the signature", name)
			}
			ok, err := protocol.Verify(v.key, s, v.ts, v.nonce, v.method, v.path, v.body)
			if err != nil || ok {
				t.Errorf("%s variant verified against the vector: %v, %v", name, ok, err)
			}
		})
	}
}

func TestParseSignature(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	good := []struct{ name, h string }{
		{"lower-case hex", "v1=" + hex64},
		{"upper-case hex", "v1=" + strings.ToUpper(hex64)},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			b, err := protocol.ParseSignature(h)
			if err != nil || len(b) != 32 {
				t.Errorf("ParseSignature(%q) = %x, %v", h, b, err)
			}
		})
	}
	bad := []struct{ name, h string }{
		{"empty", ""},
		{"prefix only", "v1="},
		{"no equals sign", "v1"},
		{"no prefix", hex64},
		{"version 2", "v2=" + hex64},
		{"upper-case prefix", "V1=" + hex64},
		{"leading space", " v1=" + hex64},
		{"trailing space", "v1=" + hex64 + " "},
		{"31 bytes", "v1=" + hex64[:62]},
		{"33 bytes", "v1=" + hex64 + "ab"},
		{"non-hex digit", "v1=" + hex64[:63] + "g"},
		{"base64 padding", "v1=" + strings.Repeat("ab", 31) + "a="},
		{"non-ASCII", "v1=" + strings.Repeat("é", 32)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.h
			if _, err := protocol.ParseSignature(h); !errors.Is(err, protocol.ErrBadSignatureHeader) {
				t.Errorf("ParseSignature(%q) err = %v, want ErrBadSignatureHeader", h, err)
			}
			ok, err := protocol.Verify(vector.key, h, vector.ts, vector.nonce, vector.method, vector.path, vector.body)
			if ok || !errors.Is(err, protocol.ErrBadSignatureHeader) {
				t.Errorf("Verify with header %q = %v, %v", h, ok, err)
			}
		})
	}
}

func TestValidNonce(t *testing.T) {
	cases := []struct {
		name  string
		nonce string
		ok    bool
	}{
		{"15 characters", strings.Repeat("a", 15), false},
		{"16 characters", strings.Repeat("a", 16), true},
		{"64 characters", strings.Repeat("Z", 64), true},
		{"65 characters", strings.Repeat("0", 65), false},
		{"empty", "", false},
		{"lower case", "abcdefghijklmnop", true},
		{"upper case", "ABCDEFGHIJKLMNOP", true},
		{"digits", "0123456789012345", true},
		{"underscores", "________________", true},
		{"hyphens", "----------------", true},
		{"whole alphabet", "aZ09_-aZ09_-aZ09", true},
		{"equals sign", "abcdefghijklmno=", false},
		{"plus sign", "abcdefghijklmno+", false},
		{"slash", "abcdefghijklmno/", false},
		{"dot", "abcdefghijklmno.", false},
		{"trailing space", "abcdefghijklmno ", false},
		{"leading space", " abcdefghijklmno", false},
		{"newline", "abcdefghijklmno\n", false},
		{"NUL", "abcdefghijklmno\x00", false},
		{"17 bytes non-ASCII", "abcdefghijklmnoé", false},
		{"18 bytes all non-ASCII", "ééééééééé", false},
		{"tab", "abcdefgh\tijklmnop", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := protocol.ValidNonce(c.nonce); got != c.ok {
				t.Errorf("ValidNonce(%q) (len %d) = %v, want %v", c.nonce, len(c.nonce), got, c.ok)
			}
		})
	}
}

func TestNewNonceIsValidAndFresh(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		n := protocol.NewNonce()
		if !protocol.ValidNonce(n) {
			t.Fatalf("NewNonce() = %q is not a valid nonce", n)
		}
		if seen[n] {
			t.Fatalf("NewNonce repeated %q", n)
		}
		seen[n] = true
	}
}

func TestParseTimestamp(t *testing.T) {
	good := []struct {
		name string
		s    string
		want int64
	}{
		{"zero", "0", 0},
		{"one", "1", 1},
		{"2026", "1767225600", 1767225600},
		{"minus one", "-1", -1},
		{"minus 2026", "-1767225600", -1767225600},
		{"leading zeros", "000000000001", 1},
		{"12 digits", "999999999999", 999999999999},
		{"minus 12 digits", "-999999999999", -999999999999},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			s, want := tc.s, tc.want
			got, err := protocol.ParseTimestamp(s)
			if err != nil || got != want {
				t.Errorf("ParseTimestamp(%q) = %d, %v; want %d", s, got, err, want)
			}
		})
	}
	bad := []struct{ name, s string }{
		{"empty", ""},
		{"minus only", "-"},
		{"plus sign", "+1"},
		{"leading space", " 1"},
		{"trailing space", "1 "},
		{"fraction", "1.5"},
		{"exponent", "1e9"},
		{"hex", "0x10"},
		{"trailing letters", "12abc"},
		{"letters", "abc"},
		{"Arabic-Indic digits", "١٢٣"},
		{"decimal point", "1767225600.0"},
		{"double minus", "--1"},
		{"trailing minus", "1-"},
		{"13 digits", "9999999999999"},
		{"14 digits", "10000000000000"},
		{"20 digits", "99999999999999999999"},
		{"minus 13 digits", "-9999999999999"},
		{"digit separator", "1_000"},
		{"leading NUL", "\x001"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if n, err := protocol.ParseTimestamp(s); !errors.Is(err, protocol.ErrBadTimestamp) {
				t.Errorf("ParseTimestamp(%q) = %d, %v; want ErrBadTimestamp", s, n, err)
			}
		})
	}
}

func TestDecodeKeyMaterial(t *testing.T) {
	raw := seq(32)
	url := base64.RawURLEncoding.EncodeToString(raw)
	good := []struct{ name, s string }{
		{"unpadded", url},
		{"padded", base64.URLEncoding.EncodeToString(raw)},
		{"trailing newline", url + "\n"},
		{"surrounding whitespace", "  " + url + "\r\n"},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			b, err := protocol.DecodeKeyMaterial(s)
			if err != nil || !bytes.Equal(b, raw) {
				t.Errorf("DecodeKeyMaterial(%q) = %x, %v", s, b, err)
			}
		})
	}
	// 0xfb 0xff… encodes to characters that differ between the alphabets.
	odd := bytes.Repeat([]byte{0xfb, 0xff, 0xbf}, 11)[:32]
	bad := []struct{ name, s string }{
		{"empty", ""},
		{"31 bytes", base64.RawURLEncoding.EncodeToString(seq(31))},
		{"33 bytes", base64.RawURLEncoding.EncodeToString(seq(33))},
		{"16 bytes", base64.RawURLEncoding.EncodeToString(seq(16))},
		{"standard alphabet", base64.StdEncoding.EncodeToString(odd)}, // '+' and '/' are not base64url
		{"invalid character", url[:len(url)-1] + "!"},
		{"inner space", url[:20] + " " + url[20:]},
		{"hex", hex.EncodeToString(raw)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s
			if b, err := protocol.DecodeKeyMaterial(s); !errors.Is(err, protocol.ErrBadKeyMaterial) {
				t.Errorf("DecodeKeyMaterial(%q) = %x, %v; want ErrBadKeyMaterial", s, b, err)
			}
		})
	}
	// Fresh material round-trips and is fresh.
	a, b := protocol.NewKeyMaterial(), protocol.NewKeyMaterial()
	if a == b {
		t.Fatal("NewKeyMaterial repeated")
	}
	if k, err := protocol.DecodeKeyMaterial(a); err != nil || len(k) != protocol.KeySize {
		t.Fatalf("DecodeKeyMaterial(NewKeyMaterial()) = %d bytes, %v", len(k), err)
	}
}

func TestAttachHeaders(t *testing.T) {
	v := vector
	h := http.Header{}
	protocol.Attach(h, "env_demo-harbor_0123456789abcdef", v.key, v.ts, v.nonce, v.method, v.path, v.body)
	if h.Get(protocol.HeaderKeyID) != "env_demo-harbor_0123456789abcdef" || h.Get(protocol.HeaderTimestamp) != v.ts ||
		h.Get(protocol.HeaderNonce) != v.nonce || h.Get(protocol.HeaderSignature) != "v1="+v.signatureHex {
		t.Fatalf("Attach set %v", h)
	}
	h = http.Header{}
	protocol.Attach(h, "", v.key, v.ts, v.nonce, v.method, v.path, v.body)
	if _, ok := h[protocol.HeaderKeyID]; ok {
		t.Fatal("Attach with an empty key id set X-Chalupa-Key-Id")
	}
}

// The Client signs exactly the bytes and path it sends, retries a 5xx with
// a fresh nonce, and returns a 4xx at once.
func TestClientSignsWhatItSendsAndRetries5xx(t *testing.T) {
	key := seq(32)
	var mu sync.Mutex
	var nonces []string
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts, nonce := r.Header.Get(protocol.HeaderTimestamp), r.Header.Get(protocol.HeaderNonce)
		ok, err := protocol.Verify(key, r.Header.Get(protocol.HeaderSignature), ts, nonce, r.Method, r.URL.Path, body)
		mu.Lock()
		calls++
		n := calls
		nonces = append(nonces, nonce)
		mu.Unlock()
		switch {
		case err != nil || !ok || r.Header.Get(protocol.HeaderKeyID) != "kid" || !protocol.ValidNonce(nonce):
			w.WriteHeader(http.StatusUnauthorized)
		case ts != strconv.FormatInt(time.Unix(1767225600, 0).Unix(), 10):
			w.WriteHeader(http.StatusBadRequest)
		case n < 3:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"accepted":true}`))
		}
	}))
	defer srv.Close()
	c := &protocol.Client{BaseURL: srv.URL, KeyID: "kid", Key: key, Retries: 3, Backoff: time.Millisecond,
		Now: func() time.Time { return time.Unix(1767225600, 0) }}
	resp, err := c.Post(context.Background(), "/api/ingest/heartbeat", []byte(`{"x":1}`))
	if err != nil {
		t.Fatalf("Post: %v", err)
	}
	if resp.Status != http.StatusAccepted || resp.Attempts != 3 || string(resp.Body) != `{"accepted":true}` {
		t.Fatalf("Post = status %d after %d attempts, body %q; want 202 after 3", resp.Status, resp.Attempts, resp.Body)
	}
	if len(nonces) != 3 || nonces[0] == nonces[1] || nonces[1] == nonces[2] || nonces[0] == nonces[2] {
		t.Fatalf("retries reused a nonce: %q", nonces)
	}

	// A 4xx is not retried.
	c.Key = seq(32)[1:]
	c.Key = append(c.Key, 0xff)
	resp, err = c.Post(context.Background(), "/api/ingest/heartbeat", []byte(`{}`))
	if err != nil || resp.Status != http.StatusUnauthorized || resp.Attempts != 1 {
		t.Fatalf("Post with a wrong key = %+v, %v; want one 401", resp, err)
	}
}
