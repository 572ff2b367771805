package envelope_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/chalupa-run/chalupa/ingest/envelope"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, envelope.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func newSealer(t *testing.T, key []byte, version uint32) *envelope.Sealer {
	t.Helper()
	s, err := envelope.New(key, version)
	if err != nil {
		t.Fatalf("envelope.New: %v", err)
	}
	return s
}

var aad = []byte("chalupa/ingest-key/env_demo-harbor_0123456789abcdef")

func TestRoundTrip(t *testing.T) {
	s := newSealer(t, newKey(t), 7)
	tests := []struct {
		name string
		pt   []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"one byte", []byte("x")},
		{"32 bytes", bytes.Repeat([]byte{0xA5}, 32)},
		{"7000 bytes", bytes.Repeat([]byte("chalupa"), 1000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pt := tc.pt
			env := s.Seal(pt, aad)
			if len(env) != len(pt)+envelope.Overhead {
				t.Fatalf("envelope of %d bytes is %d bytes, want %d", len(pt), len(env), len(pt)+envelope.Overhead)
			}
			if len(pt) >= 8 && bytes.Contains(env, pt[:8]) {
				t.Fatalf("envelope holds plaintext bytes")
			}
			v, err := envelope.Version(env)
			if err != nil || v != 7 {
				t.Fatalf("Version = %d, %v; want 7", v, err)
			}
			got, err := s.Open(env, aad)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got, pt) {
				t.Fatalf("Open = %x, want %x", got, pt)
			}
		})
	}
	if s.Version() != 7 {
		t.Fatalf("Sealer.Version = %d", s.Version())
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	s := newSealer(t, newKey(t), 1)
	pt := []byte("same plaintext, same aad")
	a, b := s.Seal(pt, aad), s.Seal(pt, aad)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical: nonce reuse")
	}
}

// Every single-byte change anywhere in the envelope (header, nonce,
// ciphertext, tag) must fail with ErrOpen, never return plaintext. A change
// to the magic or format bytes is ErrMalformed: not an envelope at all.
func TestTamperedByteFails(t *testing.T) {
	s := newSealer(t, newKey(t), 3)
	env := s.Seal([]byte("thirty-two bytes of key material"), aad)
	for i := range env {
		for _, flip := range []byte{0x01, 0x80, 0xFF} {
			bad := bytes.Clone(env)
			bad[i] ^= flip
			pt, err := s.Open(bad, aad)
			if pt != nil {
				t.Fatalf("byte %d ^ %#x: Open returned plaintext", i, flip)
			}
			want := envelope.ErrOpen
			if i < 3 { // magic "CE" and format byte
				want = envelope.ErrMalformed
			}
			if !errors.Is(err, want) {
				t.Fatalf("byte %d ^ %#x: err = %v, want %v", i, flip, err, want)
			}
		}
	}
}

// A version field rewritten to another value fails even when a Sealer of
// that version holds the same key (the header is authenticated).
func TestRewrittenVersionFails(t *testing.T) {
	key := newKey(t)
	s3, s4 := newSealer(t, key, 3), newSealer(t, key, 4)
	env := s3.Seal([]byte("secret"), aad)
	bad := bytes.Clone(env)
	binary.BigEndian.PutUint32(bad[3:7], 4)
	if _, err := s4.Open(bad, aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("version rewritten 3→4, opened by version-4 sealer of the same key: err = %v, want ErrOpen", err)
	}
	if _, err := s4.Open(env, aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("version-3 envelope opened by version-4 sealer: err = %v, want ErrOpen", err)
	}
}

func TestTruncatedOrExtendedFails(t *testing.T) {
	s := newSealer(t, newKey(t), 1)
	env := s.Seal([]byte("secret"), aad)
	if _, err := s.Open(env[:len(env)-1], aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("truncated by one: err = %v, want ErrOpen", err)
	}
	if _, err := s.Open(append(bytes.Clone(env), 0), aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("extended by one: err = %v, want ErrOpen", err)
	}
}

// An envelope moved to another row (another key id as aad) fails.
func TestMovedEnvelopeFails(t *testing.T) {
	s := newSealer(t, newKey(t), 1)
	env := s.Seal([]byte("secret"), []byte("chalupa/ingest-key/env_a_0000000000000001"))
	tests := []struct {
		name  string
		other []byte
	}{
		{"another key id", []byte("chalupa/ingest-key/env_a_0000000000000002")},
		{"key id one byte shorter", []byte("chalupa/ingest-key/env_a_000000000000000")},
		{"key id one byte longer", []byte("chalupa/ingest-key/env_a_00000000000000010")},
		{"no aad", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Open(env, tc.other); !errors.Is(err, envelope.ErrOpen) {
				t.Fatalf("opened under aad %q: err = %v, want ErrOpen", tc.other, err)
			}
		})
	}
}

// The aad is length-prefixed after the header: an aad cannot be shifted
// into or out of the header to forge the same authenticated data.
func TestEmptyAndNonEmptyAADDiffer(t *testing.T) {
	s := newSealer(t, newKey(t), 1)
	env := s.Seal([]byte("secret"), nil)
	if _, err := s.Open(env, []byte{}); err != nil {
		t.Fatalf("nil and empty aad should be the same: %v", err)
	}
	if _, err := s.Open(env, []byte{0}); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("aad {0} opened an envelope sealed with empty aad: %v", err)
	}
}

func TestWrongKeyFails(t *testing.T) {
	a, b := newSealer(t, newKey(t), 1), newSealer(t, newKey(t), 1)
	env := a.Seal([]byte("secret"), aad)
	if _, err := b.Open(env, aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("err = %v, want ErrOpen", err)
	}
}

func TestWrongVersionFails(t *testing.T) {
	key := newKey(t)
	env := newSealer(t, key, 1).Seal([]byte("secret"), aad)
	if _, err := newSealer(t, key, 2).Open(env, aad); !errors.Is(err, envelope.ErrOpen) {
		t.Fatalf("err = %v, want ErrOpen", err)
	}
}

func TestMalformed(t *testing.T) {
	s := newSealer(t, newKey(t), 1)
	good := s.Seal([]byte("secret"), aad)
	cases := map[string][]byte{
		"nil":             nil,
		"empty":           {},
		"magic only":      []byte("CE"),
		"header only":     good[:7],
		"one short":       good[:envelope.Overhead-1],
		"wrong magic":     append([]byte("XX"), good[2:]...),
		"wrong format":    append([]byte{'C', 'E', 0x02}, good[3:]...),
		"zero bytes":      make([]byte, 64),
		"ascii base64ish": []byte("Q0UBAAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := envelope.Version(env); !errors.Is(err, envelope.ErrMalformed) {
				t.Errorf("%s: Version err = %v, want ErrMalformed", name, err)
			}
			pt, err := s.Open(env, aad)
			if pt != nil || !errors.Is(err, envelope.ErrMalformed) {
				t.Errorf("%s: Open = %x, %v; want ErrMalformed", name, pt, err)
			}
		})
	}
	// Exactly Overhead bytes with a valid header is well-formed (an empty
	// plaintext) but does not authenticate.
	min := make([]byte, envelope.Overhead)
	copy(min, good[:7])
	if _, err := s.Open(min, aad); !errors.Is(err, envelope.ErrOpen) {
		t.Errorf("Overhead bytes of zeros after a header: err = %v, want ErrOpen", err)
	}
}

func TestNewRejectsBadKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33, 64} {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			if _, err := envelope.New(make([]byte, n), 1); !errors.Is(err, envelope.ErrKeySize) {
				t.Errorf("key of %d bytes: err = %v, want ErrKeySize", n, err)
			}
		})
	}
}

// Errors never carry key or plaintext bytes.
func TestErrorsAreOpaque(t *testing.T) {
	key := newKey(t)
	s := newSealer(t, key, 1)
	env := s.Seal([]byte("secret"), aad)
	env[len(env)-1] ^= 1
	_, err := s.Open(env, aad)
	if err == nil || err.Error() != envelope.ErrOpen.Error() {
		t.Fatalf("err = %v, want exactly ErrOpen", err)
	}
}
